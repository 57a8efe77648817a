package controller

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/metadata"
)

// transports says which metadata revision each transport carries for an
// instance: the metadata service (what the store serves), the config
// drive (the medium in the cdrom of a running domain, else the drive the
// next boot reads) and those of the parts (the firmware entries:
// core_firmwarepart.go).
func (c *Controller) transports(ctx context.Context, inst *Instance, tree *metadata.Tree) []Transport {
	var out []Transport
	if tree != nil {
		out = append(out, Transport{Name: types.TransportHTTP, Revision: metadata.TreeRevision(tree)})
	}
	if c.domains == nil {
		return out
	}
	running := inst.State != "" && inst.State != "shutoff" && inst.State != StateMissing && inst.State != StateUnknown
	drive := Transport{Name: types.TransportDrive}
	var medium, device string
	if doc, err := c.domains.XML(ctx, inst.Spec.Name, running); err == nil {
		if devs, err := virt.ParseDevices(doc); err == nil {
			for _, d := range devs.Disks {
				if d.Alias == virt.ConfigDriveAlias {
					medium, device = d.Source, d.Device
				}
			}
		}
	}
	switch {
	case medium == "":
		drive.Note = "none"
	default:
		rev, err := driveRevision(medium)
		switch {
		case err != nil:
			drive.Note = err.Error()
		case running && device != "cdrom":
			// disk.config was replaced since the guest opened it.
			drive.NextBoot = rev
			drive.Note = "a virtio disk: the running guest reads the drive it booted with; the next boot reads " + filepath.Base(medium)
		default:
			drive.Revision, drive.NextBoot, drive.Note = rev, rev, filepath.Base(medium)
		}
	}
	out = append(out, drive)
	var stored int64
	if tree != nil {
		stored = metadata.TreeRevision(tree)
	}
	return append(out, c.partTransports(ctx, inst.Spec, running, stored)...)
}

// driveRevision reads the revision of a config drive image.
func driveRevision(path string) (int64, error) {
	tree, _, err := configdrive.Read(path)
	if err != nil {
		return 0, err
	}
	rev := metadata.TreeRevision(tree)
	if rev == 0 {
		return 0, errors.New(filepath.Base(path) + " carries no revision")
	}
	return rev, nil
}
