// Package disks is the disks part of an instance (issue 22 item 2): how
// its disk images are made (plain ones over the image or a blank
// template, encrypted ones as LUKS qcow2 with a key-manager secret of
// their own, over an encrypted image with a copy of the image's secret
// for the backing file), the block-device record of each disk (how it was
// made, in the store at blockdev/<instance uuid>), what the guest is told
// about them, libvirt's copies of their passphrases while the domain
// runs, and the one rule for deleting a key-manager secret (nothing names
// it any more).
//
// The daemon makes the part with its handles (Options: the key manager,
// the LUKS tool, libvirt's secrets, the record store, the image catalog,
// the blank templates, this host's encryption settings), registers it
// with the controller core among the parts and binds it to the core
// (Bind: the per-instance lock) and to the states part. The core calls
// it through its own narrow interface (hostctl/controller, disks.go);
// the operations (hostctl/ops), the catalog (hostctl/catalog) and the
// disk passphrase rotator (hostctl/diskrotate) call it directly.
package disks

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/internal/keylock"
	"github.com/vmeta/vmeta/hostctl/layout"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// The handles the part uses. Each is an interface so that a test can
// hand the part a fake.
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
	// Plan is how a disk of an instance that has no file yet is made:
	// the disk's target name and its image.
	Plan = struct {
		Target string
		images.Disk
	}
)

var (
	_ KeyManager     = (*keys.Manager)(nil)
	_ LUKS           = (*encryption.Tool)(nil)
	_ LibvirtSecrets = (*virt.Conn)(nil)
	_ Images         = (*images.Dir)(nil)
)

// Options are the handles the part works with, as the daemon wires
// them. The part reads them on each use (a test may replace one before
// the part is used).
type Options struct {
	// Keys is the key manager of the disks' passphrases; nil: a disk
	// requested encrypted is refused.
	Keys KeyManager
	// LUKS makes the encrypted disks (hostctl/encryption; its defaults
	// when nil).
	LUKS LUKS
	// Secrets is libvirt's secrets; nil without a hypervisor.
	Secrets LibvirtSecrets
	// Records keeps the block-device records; nil when the store keeps
	// none. Instances is the store's instance records.
	Records   store.Records
	Instances InstanceRecords
	// Catalog is the image catalog (the images disks are made over, and
	// the secrets they name); Images makes plain disk images (when nil:
	// blank ones in Go, the others by Catalog's qemu-img; blank.go);
	// Templates are the blank templates of a flavor's
	// ephemeral and swap disks (DataDir/instances/_base when nil).
	Catalog   *images.Dir
	Images    Images
	Templates layout.Templates
	// DefaultFormat is the format of a disk requested encrypted without
	// one (hostctl serve --ephemeral-encryption-default-format; "":
	// DefaultEncryptionFormat); Support probes the formats this host
	// supports (nil: not probed).
	DefaultFormat string
	Support       func(context.Context) (encryption.Support, error)
	// DataDir is the data directory, Host names this host.
	DataDir string
	Host    string
	Logger  *slog.Logger
}

// InstanceRecords are the store's instance records (store.Instances).
type InstanceRecords interface {
	Instance(ctx context.Context, name string) (store.Instance, error)
}

// Core is the controller core as the part uses it (hostctl/controller).
type Core interface {
	// LockInstance takes the per-instance lock and returns its release.
	LockInstance(name string) (unlock func())
	// UnlessRunning runs fn under the lock of the instance with UUID
	// uuid unless its domain runs (or is paused, shutting down).
	UnlessRunning(ctx context.Context, uuid string, fn func(context.Context) error) error
}

// Holders is what may name a secret besides the block-device records:
// the instances' state records (secretuse.go), which the states part
// (hostctl/parts/vmstate) keeps.
type Holders interface {
	// Summaries returns the state records of shelved and rescued
	// instances, by instance UUID.
	Summaries(ctx context.Context) (map[string]State, error)
}

// State is an instance's shelve or rescue state as the secret rule reads
// it (an alias of an unnamed struct type, declared identically as
// vmstate.Summary).
type State = struct {
	Instance, State, ShelvedImage, RescueImage, RescueSecret string
}

// RescueDisk is the block-device record key of a rescue disk (the
// controller's RescueDisk): its secret is in use while it exists.
const RescueDisk = "_rescue"

// Part is the disks part.
type Part struct {
	Options
	log         *slog.Logger
	core        Core
	states      Holders     // nil: no instance has a state
	secretLocks keylock.Map // per key-manager secret (secretuse.go)
}

// New returns the part over the handles of o; Bind gives it the core.
func New(o Options) *Part {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.LUKS == nil {
		o.LUKS = encryption.New(encryption.Options{})
	}
	if o.Catalog != nil && o.Images == nil {
		o.Images = blankInGo{o.Catalog} // blank.go
	}
	if o.Catalog != nil && o.Templates == nil {
		o.Templates = o.Catalog.NewTemplates(filepath.Join(o.DataDir, "instances", "_base"))
	}
	return &Part{Options: o, log: o.Logger, core: unbound{}}
}

// Bind gives the part the core it locks instances through, and the
// states part whose records may name a secret (nil: none).
func (pt *Part) Bind(core Core, states Holders) {
	pt.core, pt.states = core, states
}

// unbound is the core of a part not bound yet: no instance is locked.
type unbound struct{}

func (unbound) LockInstance(string) func() { return func() {} }
func (unbound) UnlessRunning(ctx context.Context, _ string, fn func(context.Context) error) error {
	return fn(ctx)
}

// Encryption is the key manager (nil without one) and the LUKS tool
// (hostctl/ops makes and checks encrypted images with them).
func (pt *Part) Encryption() (KeyManager, LUKS) { return pt.Keys, pt.LUKS }

// DiskImages makes plain disk images; ImageDir is the image catalog.
func (pt *Part) DiskImages() Images    { return pt.Images }
func (pt *Part) ImageDir() *images.Dir { return pt.Catalog }

// LockSecret holds the lock of key-manager secret id until unlock: a
// step about to make something name the secret (an image import, a
// snapshot) holds it, so the secret is not deleted meanwhile.
func (pt *Part) LockSecret(id string) (unlock func()) { return pt.secretLocks.Lock(id) }

// DiskPath returns the image file of in's disk named disk.
func (pt *Part) DiskPath(in *model.Instance, disk string) (string, error) {
	for _, d := range in.Disks {
		if d.Name == disk {
			return virt.ResolveInDataDir(pt.DataDir, filepath.Join("instances", in.Name, layout.DiskFile(d)))
		}
	}
	return "", fmt.Errorf("disk %s of %s: %w: not in the spec", disk, in.Name, store.ErrNotFound)
}

// image is the catalog image name (nil for "" and for an unknown one).
func (pt *Part) image(ctx context.Context, name string) (*images.Image, error) {
	if name == "" || pt.Catalog == nil {
		return nil, nil
	}
	img, err := pt.Catalog.Get(ctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &img, nil
}

// hasKinds reports whether an instance's disks were laid out by a
// flavor (some disk has a kind).
func hasKinds(in *model.Instance) bool {
	return slices.ContainsFunc(in.Disks, func(d model.Disk) bool { return d.Kind != "" })
}

// diskPlan is a disk image to create.
type diskPlan struct {
	target string
	images.Disk
	// encrypt: the spec requests the disk encrypted (encryption.go).
	encrypt bool
	// image is the catalog image Base is (the root disk's), for an
	// encrypted image's backing secret (backing.go).
	image string
}

// planDisks decides how each disk of in that has no image file yet is
// created: disks[0] (a flavor's root disk) over the spec's image when it
// names one, a flavor's ephemeral and swap disks over their blank
// templates, every other disk blank with its size. A disk whose file
// exists (an earlier apply made it) is kept as it is. It only reads (but
// for making a missing template); the field errors say what a spec
// lacks.
func (pt *Part) planDisks(ctx context.Context, in *model.Instance) ([]diskPlan, error) {
	var plans []diskPlan
	var errs []model.FieldError
	kinded := hasKinds(in)
	for i, d := range in.Disks {
		p, err := pt.DiskPath(in, d.Name)
		if err != nil {
			errs = append(errs, model.FieldError{Field: fmt.Sprintf("disks[%d]", i), Value: d.Name, Rule: err.Error()})
			continue
		}
		if _, err := os.Stat(p); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("disk %s: %w", d.Name, err)
		}
		plan := diskPlan{target: d.Name, Disk: images.Disk{Path: p, Size: d.Size}, encrypt: d.Encrypted}
		switch {
		case d.Kind == model.DiskKindEphemeral || d.Kind == model.DiskKindSwap:
			// An overlay of the blank template of its size, made now if
			// the cache has none (a template is no instance's: it stays).
			base, err := layout.BlankTemplate(ctx, pt.Templates, d)
			if err != nil {
				return nil, fmt.Errorf("disk %s: %w", d.Name, err)
			}
			plan.Base, plan.Size = &base, ""
		case d.Kind == model.DiskKindRoot && in.Image == "" && d.Size != "":
			// A flavor's root disk without an image: blank.
		case (d.Kind == model.DiskKindRoot || i == 0 && !kinded) && in.Image != "":
			base, err := pt.Images.Lookup(ctx, in.Image)
			if err != nil {
				errs = append(errs, model.FieldError{Field: "image", Value: in.Image, Rule: err.Error()})
				continue
			}
			plan.Base, plan.image = &base, in.Image
		case d.Size == "":
			rule := "is required to create the disk (only disks[0] is created from the spec's image)"
			if in.Image == "" {
				rule = "is required to create the disk (the spec names no image)"
			}
			errs = append(errs, model.FieldError{Field: fmt.Sprintf("disks[%d].size", i), Rule: rule})
			continue
		}
		plans = append(plans, plan)
	}
	if len(errs) > 0 {
		return nil, &model.SpecError{Errors: errs}
	}
	return plans, nil
}

// createDisks creates the planned images of instance in — encrypted ones
// with their own secret (encryption.go) — records how each was made (its
// block-device record) and registers their removal as undo steps.
func (pt *Part) createDisks(ctx context.Context, r *revert.Reverter, in *model.Instance, plans []diskPlan) error {
	if err := pt.startDisks(ctx, r, plans)(); err != nil {
		return err
	}
	return pt.finishDisks(ctx, r, in, plans)
}

// startDisks registers the removal of every planned image (first: a
// failing qemu-img may leave a partial file) and starts making the plain
// ones at once, a qemu-img each (issue 23 item 4: four disks one after
// the other were most of an apply). The function it returns waits until
// every one has ended — call it before returning or undoing anything, so
// that an undo never races a qemu-img still writing — and returns the
// first error in the plans' order; it may be called again.
func (pt *Part) startDisks(ctx context.Context, r *revert.Reverter, plans []diskPlan) (wait func() error) {
	for _, p := range plans {
		r.Add("remove disk image "+p.Path, func(context.Context) error { return removeFile(p.Path) })
	}
	errs := make([]error, len(plans))
	var wg sync.WaitGroup
	for i, p := range plans {
		if p.encrypt {
			continue
		}
		wg.Go(func() {
			if err := pt.Images.Create(ctx, p.Disk); err != nil {
				errs[i] = fmt.Errorf("create disk %s: %w", p.target, err)
			}
		})
	}
	return func() error {
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// finishDisks, once startDisks' plain images are made, creates the
// encrypted ones one by one (each has a secret and undo steps of its own)
// and records how every planned disk was made.
func (pt *Part) finishDisks(ctx context.Context, r *revert.Reverter, in *model.Instance, plans []diskPlan) error {
	upd := map[string]*encryption.BlockDevice{}
	created := time.Now().UTC().Truncate(time.Second)
	for _, p := range plans {
		if p.encrypt {
			continue
		}
		upd[p.target] = &encryption.BlockDevice{Disk: p.target, Created: created}
		pt.log.Debug("disk created", "disk", p.Path, "base", p.Base, "size", p.Size, "encrypted", false)
	}
	for _, p := range plans {
		if !p.encrypt {
			continue
		}
		made, err := pt.createEncrypted(ctx, r, in, p)
		if err != nil {
			return err
		}
		upd[p.target] = &made
		pt.log.Debug("disk created", "disk", p.Path, "base", p.Base, "size", p.Size, "encrypted", made.Encrypted)
	}
	return pt.UpdateBlockDevices(ctx, r, in, upd)
}

func removeFile(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Make plans the disks of in that have no file yet and refuses, before
// anything is made, the encryption this host cannot honour. create makes
// them — the plain ones at once, the encrypted ones with their secrets —
// records how each was made, registers their removal on r and returns
// committed, which deletes the secrets of the disks made anew over an
// earlier record (a rebuild's root disk) once the operation stands.
func (pt *Part) Make(ctx context.Context, in *model.Instance) (create func(context.Context, *revert.Reverter) (committed func(context.Context), err error), err error) {
	plans, err := pt.planDisks(ctx, in)
	if err != nil {
		return nil, err
	}
	if err := pt.checkEncryption(ctx, in, plans); err != nil {
		return nil, err
	}
	return func(ctx context.Context, r *revert.Reverter) (func(context.Context), error) {
		replaced, err := pt.replacedSecrets(ctx, in, plans)
		if err != nil {
			return nil, err
		}
		if err := pt.createDisks(ctx, r, in, plans); err != nil {
			return nil, err
		}
		return func(ctx context.Context) { pt.DeleteSecrets(ctx, in, replaced) }, nil
	}, nil
}

// Plans returns how the disks of in that have no file yet are made
// (nothing is checked or made).
func (pt *Part) Plans(ctx context.Context, in *model.Instance) ([]Plan, error) {
	plans, err := pt.planDisks(ctx, in)
	if err != nil {
		return nil, err
	}
	out := make([]Plan, len(plans))
	for i, p := range plans {
		out[i] = Plan{Target: p.target, Disk: p.Disk}
	}
	return out, nil
}

// BlockDevices returns the block-device records of instance uuid (none
// when the store keeps no records).
func (pt *Part) BlockDevices(ctx context.Context, uuid string) (encryption.BlockDevices, error) {
	rec, _, err := pt.loadBlockDevices(ctx, uuid)
	return rec, err
}

// DefineDiskSecret hands libvirt the passphrase of key-manager secret
// keyID under the libvirt secret id, for in's disk; the undo step on r
// undefines it.
func (pt *Part) DefineDiskSecret(ctx context.Context, r *revert.Reverter, in *model.Instance, disk, keyID, id string) error {
	pass, err := pt.Keys.Passphrase(ctx, keyID)
	if err != nil {
		return err
	}
	err = pt.Secrets.DefineSecret(ctx, virt.LibvirtSecret{UUID: id, Usage: pt.SecretUsage(in.UUID, disk)}, pass)
	clear(pass)
	if err != nil {
		return err
	}
	r.Add("undefine libvirt secret "+id, func(ctx context.Context) error { return pt.Secrets.UndefineSecret(ctx, id) })
	return nil
}

// ReleaseSecret deletes the key-manager secret id for the catalog
// (hostctl/catalog: `secret delete`, an image deleted with its secret),
// image being the image deleted ("" for none), by the one rule
// (secretuse.go).
func (pt *Part) ReleaseSecret(ctx context.Context, id, image string) error {
	return pt.deleteSecret(ctx, id, secretRelease{image: image})
}

// EncryptionConflict is the conflict (409, ErrEncryption) of an
// encryption request this host cannot honour, naming field, value and
// rule.
func EncryptionConflict(field string, value any, rule string) error {
	return &encryptionConflict{se: &model.SpecError{Errors: []model.FieldError{{Field: field, Value: value, Rule: rule}}}}
}
