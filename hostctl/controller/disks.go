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
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// Host files of an instance, under <data dir>/instances/<name>/:
//
//	disk                  a flavor's root disk, over the image (Nova's name)
//	disk.eph0, disk.swap  a flavor's ephemeral and swap disks, over blank templates in instances/_base
//	disk-<target>.qcow2   each other disk (hostctl/images; over the spec's image for disks[0])
//	disk.config           the config drive (ISO 9660 or vfat)
//	console.log           the serial console (written by virtlogd)
const (
	driveFile   = "disk.config"
	consoleFile = "console.log"
)

func diskFile(target string) string { return "disk-" + target + "." + images.DiskFormat }

// diskFileOf is the file of a disk: Nova's names for a flavor's disks
// (every one qcow2), diskFile for the others.
func diskFileOf(d model.Disk) string {
	switch d.Kind {
	case model.DiskKindRoot:
		return "disk"
	case model.DiskKindEphemeral:
		return "disk.eph0"
	case model.DiskKindSwap:
		return "disk.swap"
	}
	return diskFile(d.Name)
}

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
		h.Disks[d.Name] = virt.DiskSource{Path: filepath.Join(rel, diskFileOf(d)), Format: images.DiskFormat}
	}
	return h
}

// The handles of the disks part (hostctl/parts/disks) the core holds
// and hands it (core_diskpart.go). Each is an alias of an unnamed
// interface type, declared identically in hostctl/parts/disks, so that
// the two packages share the type without importing each other.
type (
	// KeyManager is the key manager (internal/keys).
	KeyManager = interface {
		Create(ctx context.Context, req keys.Request) (keys.Secret, error)
		Get(ctx context.Context, id string) (keys.Secret, error)
		Passphrase(ctx context.Context, id string) ([]byte, error)
		Delete(ctx context.Context, id string) error
		List(ctx context.Context, project string) ([]keys.Secret, error)
		KeyID() string
	}
	// LUKS makes and checks encrypted disk images (hostctl/encryption).
	LUKS = interface {
		Create(ctx context.Context, d encryption.Disk, pass []byte) error
		Inspect(ctx context.Context, path string) (encryption.Info, error)
		Verify(ctx context.Context, path string, pass, backing []byte) error
		Resize(ctx context.Context, path string, size int64, shrink bool, pass, backing []byte) error
		Convert(ctx context.Context, dst string, src encryption.Source, pass []byte) error
		VerifyImage(ctx context.Context, path, format string, pass []byte) error
	}
	// LibvirtSecrets hands passphrases to QEMU through libvirt (virt.Conn).
	LibvirtSecrets = interface {
		DefineSecret(ctx context.Context, s virt.LibvirtSecret, value []byte) error
		UndefineSecret(ctx context.Context, uuid string) error
		Secrets(ctx context.Context, prefix string) ([]virt.LibvirtSecret, error)
	}
	// Images makes the disk images of instances (hostctl/images).
	Images = interface {
		// Lookup finds a base image by name, with its format.
		Lookup(ctx context.Context, name string) (images.Base, error)
		// Create creates a disk image; a failure may leave a partial file.
		Create(ctx context.Context, d images.Disk) error
	}
	// DiskPlan is how a disk of the instance that has no file yet is
	// made: its target name and its image.
	DiskPlan = struct {
		Target string
		images.Disk
	}
)

// Disks is the disks part (hostctl/parts/disks) as the core uses it:
// how an instance's disks are made, their block-device records, what the
// guest is told about them, libvirt's copies of their passphrases and
// the secrets' deletion. The daemon wires it (Options.Disks).
type Disks interface {
	// Make plans and checks the disks of in that have no file yet;
	// create makes them (undo steps on r) and returns committed, run
	// once the operation stands.
	Make(ctx context.Context, in *model.Instance) (create func(context.Context, *revert.Reverter) (committed func(context.Context), err error), err error)
	Plans(ctx context.Context, in *model.Instance) ([]DiskPlan, error)
	// Told is in as the guest is told about it (each disk's encrypted
	// flag from its record) and the records of its disks; Sources sets
	// the libvirt secrets of host's encrypted disks.
	Told(ctx context.Context, in *model.Instance) (*model.Instance, []encryption.BlockDevice, error)
	Sources(ctx context.Context, in *model.Instance, host *virt.Host) error
	BlockDevices(ctx context.Context, uuid string) (encryption.BlockDevices, error)
	UpdateBlockDevices(ctx context.Context, r *revert.Reverter, in *model.Instance, upd map[string]*encryption.BlockDevice) error
	ResizeDisk(ctx context.Context, in *model.Instance, disk, path string, size int64, shrink bool) error
	// DefineSecrets and UndefineSecrets put the passphrases of an
	// instance's disks into libvirt and take them out; SecretUsage is
	// the libvirt usage of a disk's secret.
	DefineSecrets(ctx context.Context, r *revert.Reverter, in *model.Instance) error
	UndefineSecrets(ctx context.Context, instUUID string) error
	DefineDiskSecret(ctx context.Context, r *revert.Reverter, in *model.Instance, disk, keyID, id string) error
	SecretUsage(instUUID, disk string) string
	// Forget drops the secrets and records of removed disks,
	// ForgetInstance those of a deleted instance; DeleteSecrets and
	// ReleaseSecret delete secrets nothing names any more; Sweep is the
	// reconciler's clean-up after crashes.
	Forget(ctx context.Context, in *model.Instance, disks []string)
	ForgetInstance(ctx context.Context, name, uuid string) error
	DeleteSecrets(ctx context.Context, in *model.Instance, ids []string)
	ReleaseSecret(ctx context.Context, id, image string) error
	Sweep(ctx context.Context) error
}

// ErrNoKeyManager: the controller has no key manager.
var ErrNoKeyManager = fmt.Errorf("%w: this hostctl has no key manager", ErrNoHypervisor)

// noDisks is the core without a disks part: no disk is made, the guest
// is told no disk is encrypted, there are no secrets.
type noDisks struct{}

var errNoDisks = fmt.Errorf("%w: no disks part (hostctl/parts/disks) is registered", ErrNoHypervisor)

func (noDisks) Make(context.Context, *model.Instance) (func(context.Context, *revert.Reverter) (func(context.Context), error), error) {
	return nil, errNoDisks
}
func (noDisks) Plans(context.Context, *model.Instance) ([]DiskPlan, error) { return nil, errNoDisks }
func (noDisks) Told(_ context.Context, in *model.Instance) (*model.Instance, []encryption.BlockDevice, error) {
	out := in.Clone()
	for i := range out.Disks {
		out.Disks[i].Encrypted, out.Disks[i].EncryptionFormat = false, ""
	}
	return out, nil, nil
}
func (noDisks) Sources(context.Context, *model.Instance, *virt.Host) error { return nil }
func (noDisks) BlockDevices(context.Context, string) (encryption.BlockDevices, error) {
	return encryption.BlockDevices{}, nil
}
func (noDisks) UpdateBlockDevices(context.Context, *revert.Reverter, *model.Instance, map[string]*encryption.BlockDevice) error {
	return errNoDisks
}
func (noDisks) ResizeDisk(context.Context, *model.Instance, string, string, int64, bool) error {
	return errNoDisks
}
func (noDisks) DefineSecrets(context.Context, *revert.Reverter, *model.Instance) error { return nil }
func (noDisks) UndefineSecrets(context.Context, string) error                          { return nil }
func (noDisks) DefineDiskSecret(context.Context, *revert.Reverter, *model.Instance, string, string, string) error {
	return ErrNoKeyManager
}
func (noDisks) SecretUsage(string, string) string                        { return "" }
func (noDisks) Forget(context.Context, *model.Instance, []string)        {}
func (noDisks) ForgetInstance(context.Context, string, string) error     { return nil }
func (noDisks) DeleteSecrets(context.Context, *model.Instance, []string) {}
func (noDisks) ReleaseSecret(context.Context, string, string) error      { return ErrNoKeyManager }
func (noDisks) Sweep(context.Context) error                              { return nil }

func removeFile(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
