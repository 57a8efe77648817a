package controller

// The firmware transport: every publish also hands the instance's
// guest-facing facts to QEMU's firmware configuration device (fw_cfg),
// which a guest reads from its earliest stages of boot without a mount or
// a network. The entries (metadata.FirmwareEntries: the latest devices
// document, the uuid, the metadata revision) are cut from the tree the
// publish rendered for the drive and the metadata service, written as
// files of the instance directory (fw_cfg.<revision>.<entry>, atomically,
// with the config drive's permissions), and named in the persistent
// definition's <sysinfo type='fwcfg'> — redefined before the store write
// and put back with everything else if that write fails. QEMU reads the
// files when it starts: a running guest keeps the revision it booted
// with, the next boot gets the newest. `hostctl instance show` names the
// revision each transport carries (Transports).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/atomicfile"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/revert"
)

// firmwareFileRE matches the instance directory's firmware entry files.
var firmwareFileRE = regexp.MustCompile(`^fw_cfg\.([0-9]+)\.[a-z]+$`)

// setFirmware writes the firmware entries of tree (revision rev) into the
// instance directory and names them in the persistent definition of the
// instance's domain, or, with the firmware transport off, takes any
// entries out of it. Each step registers its undo on r. A domain libvirt
// does not have is left alone.
//
// Entries whose content (devices document, uuid) the persistent definition
// already names are left as they are, files and definition: a publish that
// changes nothing the firmware carries redefines nothing. Their revision
// entry then names the revision that last changed them, older than the
// publish's; the guest compares content where revisions differ (the agent
// takes an older revision with the devices it applied as current). It
// returns the revision whose files the definition names (0: none).
func (c *Controller) setFirmware(ctx context.Context, r *revert.Reverter, name string, tree *metadata.Tree, rev int64) (int64, error) {
	prev, err := c.domains.XML(ctx, name, false)
	if isNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("firmware entries: %w", err)
	}
	have, err := virt.FirmwareFiles(prev)
	if err != nil {
		return 0, err
	}
	var files []virt.FirmwareFile
	if c.firmware {
		entries, err := metadata.FirmwareEntries(tree)
		if err != nil {
			return 0, err
		}
		if firmwareCurrent(have, entries) {
			return virt.FirmwareRevision(have), nil
		}
		dir := c.instanceDir(name)
		for _, e := range entries {
			p := virt.FirmwareFileName(dir, rev, e.Name)
			if err := removeFile(p); err != nil { // a leftover of a crash
				return 0, err
			}
			r.Add("remove firmware entry file "+p, func(context.Context) error { return removeFile(p) })
			data := e.Data
			if err := atomicfile.Write(p, 0o600, func(f *os.File) error {
				_, err := f.Write(data)
				return err
			}); err != nil {
				return 0, fmt.Errorf("firmware entry %s: %w", e.Name, err)
			}
			files = append(files, virt.FirmwareFile{Name: e.Name, File: p})
		}
	} else if len(have) == 0 {
		return 0, nil
	}
	next, err := virt.SetFirmware(prev, c.dataDir, files)
	if err != nil {
		return 0, err
	}
	if _, err := c.domains.Define(ctx, next); err != nil {
		return 0, fmt.Errorf("firmware entries: redefine domain %s: %w", name, err)
	}
	r.Add("restore the firmware entries of domain "+name, func(ctx context.Context) error {
		_, err := c.domains.Define(ctx, prev)
		return err
	})
	return virt.FirmwareRevision(files), nil
}

// firmwareCurrent reports whether the entry files a definition names (have)
// carry what entries would, but for the revision entry: the same entries
// in the same order, each file there with the same content. The revision
// entry must be one (the files' names carry it), not necessarily entries'.
func firmwareCurrent(have []virt.FirmwareFile, entries []metadata.FirmwareEntry) bool {
	if len(have) != len(entries) || virt.FirmwareRevision(have) <= 0 {
		return false
	}
	for i, e := range entries {
		if have[i].Name != e.Name {
			return false
		}
		b, err := os.ReadFile(have[i].File)
		if err != nil {
			return false
		}
		if e.Name == metadata.FirmwareRevision {
			if n, err := metadata.ParseFirmwareRevision(b); err != nil || n != virt.FirmwareRevision(have) {
				return false
			}
			continue
		}
		if !bytes.Equal(b, e.Data) {
			return false
		}
	}
	return true
}

// firmwareDrift reports whether the persistent definition's firmware
// entries disagree with the firmware transport's setting: none while it is
// on (an instance published before it was turned on), of a newer revision
// than the record's, or naming files that are gone; or some while it is
// off.
func (c *Controller) firmwareDrift(ctx context.Context, name string, rev int64) bool {
	doc, err := c.domains.XML(ctx, name, false)
	if err != nil {
		return false
	}
	files, err := virt.FirmwareFiles(doc)
	if err != nil {
		return false
	}
	if !c.firmware {
		return len(files) > 0
	}
	for _, f := range files {
		if !fileExists(f.File) {
			return true // QEMU would not start: write them again
		}
	}
	// An older revision is that of the last publish that changed the
	// entries (setFirmware); none, or a newer one (a publish that
	// redefined and did not finish), is drift.
	fr := virt.FirmwareRevision(files)
	return fr == 0 || fr > rev
}

// pruneFirmware deletes the instance's firmware entry files of other
// revisions than keep (0: all). QEMU read a running domain's at its start;
// the persistent definition names keep's.
func (c *Controller) pruneFirmware(name string, keep int64) {
	dir := c.instanceDir(name)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		m := firmwareFileRE.FindStringSubmatch(e.Name())
		if m == nil || m[1] == strconv.FormatInt(keep, 10) {
			continue
		}
		if err := removeFile(filepath.Join(dir, e.Name())); err != nil {
			c.log.Warn("could not remove an old firmware entry file", "file", e.Name(), "err", err)
		}
	}
}

// firmwareTransport says which revision the firmware carries: the running
// domain's (what QEMU read at its start, fixed until the guest restarts)
// and the persistent definition's (the next boot).
func (c *Controller) firmwareTransport(ctx context.Context, name string, running bool) (Transport, error) {
	t := Transport{Name: types.TransportFirmware}
	persistent, err := c.domains.XML(ctx, name, false)
	if err != nil {
		return t, err
	}
	pf, err := virt.FirmwareFiles(persistent)
	if err != nil {
		return t, err
	}
	t.NextBoot = virt.FirmwareRevision(pf)
	if !running {
		t.Revision = t.NextBoot
		if t.Revision == 0 {
			t.Note = "off (hostctl serve --firmware-metadata)"
		}
		return t, nil
	}
	live, err := c.domains.XML(ctx, name, true)
	if err != nil {
		return t, err
	}
	lf, err := virt.FirmwareFiles(live)
	if err != nil {
		return t, err
	}
	t.Revision = virt.FirmwareRevision(lf)
	switch {
	case t.Revision == 0 && t.NextBoot == 0:
		t.Note = "off (hostctl serve --firmware-metadata)"
	case t.Revision == 0:
		t.Note = "none in the running guest (it started before the firmware transport was on); from the next boot"
	default:
		t.Note = "fixed while the guest runs; a restart brings the next boot's"
	}
	return t, nil
}

// transports says which metadata revision each transport carries for an
// instance: the metadata service (what the store serves), the config
// drive (the medium in the cdrom of a running domain, else the drive the
// next boot reads) and the firmware.
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
	fw, err := c.firmwareTransport(ctx, inst.Spec.Name, running)
	if err != nil {
		fw.Note = err.Error()
	}
	if tree != nil && fw.NextBoot > 0 && fw.NextBoot < metadata.TreeRevision(tree) {
		// setFirmware leaves entries alone that a publish did not change.
		fw.Note += fmt.Sprintf("; the next boot's entries are revision %d's, unchanged since (current)", fw.NextBoot)
	}
	return append(out, fw)
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
