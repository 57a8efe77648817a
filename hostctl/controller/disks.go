package controller

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/layout"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// The host files of an instance (hostctl/layout: DiskFile).
const (
	driveFile   = "disk.config"
	consoleFile = "console.log"
)

// host is where the instance's files live, for virt.BuildDomain.
func (c *Controller) host(in *model.Instance) virt.Host {
	rel := filepath.Join("instances", in.Name)
	h := virt.Host{
		DataDir:   c.dataDir,
		Disks:     make(map[string]virt.DiskSource, len(in.Disks)),
		SerialLog: filepath.Join(rel, consoleFile),
	}
	if in.WantsConfigDrive() { // config_drive: false: no cdrom
		h.ConfigDrive = filepath.Join(rel, driveFile)
	}
	for _, d := range in.Disks {
		h.Disks[d.Name] = virt.DiskSource{Path: filepath.Join(rel, layout.DiskFile(d)), Format: images.DiskFormat}
	}
	return h
}

// Disks is the disks part (hostctl/parts/disks) as the core calls it at
// its own points of an operation: Make the disks that have no file
// before the domain is defined (create's undo steps go on r; committed
// runs once the operation stands), Told what the guest is told of them
// (each disk's encrypted flag from its block-device record), Sources the
// libvirt secrets of host's encrypted disks, DefineSecrets before a start
// and UndefineSecrets after a stop, Forget removed disks' secrets and
// records (a deleted instance's go in the part's AfterDelete). The daemon
// registers the part among Options.Parts and wires its handles (key
// manager, LUKS, libvirt secrets, records) itself, and hands the part to
// the reconciler (hostctl/reconcile: its sweep) directly.
type Disks interface {
	Make(ctx context.Context, in *model.Instance) (create func(context.Context, *revert.Reverter) (committed func(context.Context), err error), err error)
	Told(ctx context.Context, in *model.Instance) (*model.Instance, []encryption.BlockDevice, error)
	Sources(ctx context.Context, in *model.Instance, host *virt.Host) error
	DefineSecrets(ctx context.Context, r *revert.Reverter, in *model.Instance) error
	UndefineSecrets(ctx context.Context, instUUID string) error
	Forget(ctx context.Context, in *model.Instance, disks []string)
}

// disksOf is the disks part among parts, noDisks without one.
func disksOf(parts []part.Part) Disks {
	for _, p := range parts {
		if d, ok := p.(Disks); ok {
			return d
		}
	}
	return noDisks{}
}

// noDisks is the core without a disks part: no disk is made, the guest
// is told no disk is encrypted, there are no secrets.
type noDisks struct{}

var errNoDisks = fmt.Errorf("%w: no disks part (hostctl/parts/disks) is registered", ErrNoHypervisor)

func (noDisks) Make(context.Context, *model.Instance) (func(context.Context, *revert.Reverter) (func(context.Context), error), error) {
	return nil, errNoDisks
}
func (noDisks) Told(_ context.Context, in *model.Instance) (*model.Instance, []encryption.BlockDevice, error) {
	out := in.Clone()
	for i := range out.Disks {
		out.Disks[i].Encrypted, out.Disks[i].EncryptionFormat = false, ""
	}
	return out, nil, nil
}
func (noDisks) Sources(context.Context, *model.Instance, *virt.Host) error             { return nil }
func (noDisks) DefineSecrets(context.Context, *revert.Reverter, *model.Instance) error { return nil }
func (noDisks) UndefineSecrets(context.Context, string) error                          { return nil }
func (noDisks) Forget(context.Context, *model.Instance, []string)                      {}

func removeFile(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
