package diskrotate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/crashpoint"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// Core is what the rotator needs of the controller core
// (*controller.Controller implements it).
type Core interface {
	// LockInstance takes the per-instance lock every operation on the
	// named instance holds, and returns its release.
	LockInstance(name string) (unlock func())
	// OwnInstance returns this host's instance named name (an error
	// wrapping store.ErrNotFound when there is no such instance).
	OwnInstance(ctx context.Context, name string) (*model.Instance, error)
	// InstanceState returns in's VM state (shelved, rescued; "" for
	// none) and whether its domain runs.
	InstanceState(ctx context.Context, in *model.Instance) (vmState string, running bool, err error)
}

// Instances are the store's instance records, of every host
// (store.Instances).
type Instances interface {
	Instances(ctx context.Context) ([]store.Instance, error)
}

// Disks is what the rotator needs of the disks part
// (hostctl/parts/disks: *disks.Part implements it): the block-device
// records, the disks' files and libvirt's copies of the passphrases.
type Disks interface {
	// DiskPath is the image file of in's disk named disk.
	DiskPath(in *model.Instance, disk string) (string, error)
	// BlockDevices returns the block-device records of instance uuid.
	BlockDevices(ctx context.Context, uuid string) (encryption.BlockDevices, error)
	// HostBlockDevices returns the block-device records of this host's
	// instances, by instance UUID (a record that cannot be read is left
	// out and named in the error).
	HostBlockDevices(ctx context.Context) (map[string]encryption.BlockDevices, error)
	// SetBlockDevice rewrites the record of one disk of in (bd.Disk).
	SetBlockDevice(ctx context.Context, in *model.Instance, bd encryption.BlockDevice) error
	// UpdateLibvirtSecret gives the libvirt secret id of in's disk the
	// value pass, if libvirt has it defined (updated false: it has not).
	UpdateLibvirtSecret(ctx context.Context, in *model.Instance, disk, id string, pass []byte) (updated bool, err error)
}

// Keys is the key manager (internal/keys): the current passphrase of a
// secret and the pending one of a rotation.
type Keys interface {
	Passphrase(ctx context.Context, id string) ([]byte, error)
	SetPending(ctx context.Context, id string) ([]byte, error)
	Pending(ctx context.Context, id string) ([]byte, error)
	HasPending(ctx context.Context, id string) (bool, error)
	Promote(ctx context.Context, id string) error
	DropPending(ctx context.Context, id string) error
}

var _ Keys = (*keys.Manager)(nil)

// LUKS opens LUKS images and manages their key slots (hostctl/encryption).
type LUKS interface {
	Verify(ctx context.Context, path string, pass, backing []byte) error
	KeySlots(ctx context.Context, path string) ([]bool, error)
	AddKeySlot(ctx context.Context, path string, slot int, cur, next, backing []byte) error
	EraseKeySlot(ctx context.Context, path string, slot int, keep, backing []byte) error
}

var _ LUKS = (*encryption.Tool)(nil)

// Proc names the disk passphrase rotation procedure for
// internal/crashpoint.
const Proc = "disk-rotate"

// The steps of the procedure, in order (crashpoint names).
var _ = crashpoint.Declare(Proc,
	"pending-stored", "slot-chosen", "slot-added", "verified", "promoted", "libvirt-updated", "old-erased", "recorded")

// PendingVMState is the Result.Pending of a shelved or rescued instance.
func PendingVMState(state string) string {
	return "instance " + state + ": its disks rotate when it is back and stopped"
}

// PendingRunning is the Result.Pending of a running instance.
const PendingRunning = "instance running: its disks rotate when it next stops"

// ErrNoRotation: disk passphrases cannot be rotated here (no core, key
// manager or LUKS tool).
var ErrNoRotation = errors.New("disk passphrase rotation unavailable")

// Rotator rotates the LUKS passphrases of a host's instances:
// keyrotation.Rotator, Recoverer and Lister for keyrotation.Disk.
type Rotator struct {
	core  Core
	st    Instances
	disks Disks
	keys  Keys
	luks  LUKS
	log   *slog.Logger
	// step marks a step of the procedure done: crashpoint.Hit (a
	// vmetacrash build dies there). The package's tests stop the
	// procedure at a step in-process.
	step func(name string)
}

var (
	_ keyrotation.Rotator         = (*Rotator)(nil)
	_ keyrotation.Recoverer       = (*Rotator)(nil)
	_ keyrotation.Lister          = (*Rotator)(nil)
	_ keyrotation.Generationer    = (*Rotator)(nil)
	_ keyrotation.InstanceChecker = (*Rotator)(nil)
)

// New returns the disk passphrase rotator of core's instances (their
// records in st), whose disks are the disks part's (dp), with the key
// manager and the LUKS tool the disks were made with (log nil:
// slog.Default). Its methods return ErrNoRotation when one is nil.
func New(core Core, st Instances, dp Disks, km Keys, luks LUKS, log *slog.Logger) *Rotator {
	if log == nil {
		log = slog.Default()
	}
	return &Rotator{core: core, st: st, disks: dp, keys: km, luks: luks, log: log, step: func(s string) { crashpoint.Hit(crashpoint.Name(Proc, s)) }}
}

func (r *Rotator) usable() error {
	if r.core == nil || r.disks == nil || r.keys == nil || r.luks == nil {
		return fmt.Errorf("%w: this hostctl has no key manager with pending passphrases or LUKS key slot tool", ErrNoRotation)
	}
	return nil
}

// Subjects lists this host's instances with encrypted disks.
func (r *Rotator) Subjects(ctx context.Context) ([]keyrotation.Subject, error) {
	if err := r.usable(); err != nil {
		return nil, err
	}
	recs, err := r.disks.HostBlockDevices(ctx)
	if err != nil {
		return nil, fmt.Errorf("disk rotation subjects: %w", err)
	}
	var out []keyrotation.Subject
	for uuid, rec := range recs {
		s := keyrotation.Subject{Class: keyrotation.Disk, InstanceUUID: uuid, InstanceName: rec.Instance}
		encrypted := false
		for _, bd := range rec.Disks {
			if !rotatable(bd) {
				continue
			}
			encrypted = true
			// When its keys were made: the oldest disk's creation.
			if !bd.Created.IsZero() && (s.Created.IsZero() || bd.Created.Before(s.Created)) {
				s.Created = bd.Created
			}
		}
		if !encrypted {
			continue
		}
		if in, _, err := r.instanceBlockDevices(ctx, rec.Instance); err != nil || in.UUID != uuid {
			continue // gone (the sweep deletes the record)
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b keyrotation.Subject) int { return strings.Compare(a.InstanceUUID, b.InstanceUUID) })
	return out, nil
}

// InstanceExists implements keyrotation.InstanceChecker: whether an
// instance with the UUID is in the store (on any host), so the key
// rotation engine deletes only the records of instances that are gone.
func (r *Rotator) InstanceExists(ctx context.Context, uuid string) (bool, error) {
	if r.st == nil {
		return false, ErrNoRotation
	}
	recs, err := r.st.Instances(ctx)
	if err != nil {
		return false, fmt.Errorf("instances: %w", err)
	}
	return slices.ContainsFunc(recs, func(rec store.Instance) bool { return strings.EqualFold(rec.UUID, uuid) }), nil
}

// rotatable: an encrypted disk with its own key-manager secret.
func rotatable(bd encryption.BlockDevice) bool { return bd.Encrypted && bd.EncryptionSecretUUID != "" }

// Rotate rotates the passphrases of every encrypted disk of the subject's
// instance to generation gen (see the procedure in the package comment).
// keep must be 0: disk passphrases rotate in place. A running instance is
// not touched unless its disks are at gen already: Result{Pending:
// PendingRunning}.
func (r *Rotator) Rotate(ctx context.Context, s keyrotation.Subject, gen int64, keep int, progress func(keyrotation.Progress)) (keyrotation.Result, error) {
	if err := r.usable(); err != nil {
		return keyrotation.Result{}, err
	}
	if s.Class != keyrotation.Disk || s.InstanceName == "" {
		return keyrotation.Result{}, fmt.Errorf("disk rotation: subject %s: not an instance's disk passphrases", s)
	}
	if keep != 0 {
		return keyrotation.Result{}, fmt.Errorf("%w: %s: keepPriorKeyCount %d: disk passphrases rotate in place (no prior key slot is kept)", keyrotation.ErrInvalid, s, keep)
	}
	if gen < 1 {
		return keyrotation.Result{}, fmt.Errorf("%w: %s: keyGeneration %d: must be at least 1", keyrotation.ErrInvalid, s, gen)
	}
	defer r.core.LockInstance(s.InstanceName)()
	in, disks, err := r.instanceDisks(ctx, s)
	if err != nil {
		return keyrotation.Result{}, err
	}
	todo := 0
	for _, d := range disks {
		bd, _, err := r.disk(ctx, in, d.Name)
		if err != nil {
			return keyrotation.Result{}, err
		}
		if due, err := r.due(ctx, bd, gen); err != nil {
			return keyrotation.Result{}, err
		} else if due {
			todo++
		}
	}
	if todo == 0 {
		return keyrotation.Result{Done: true}, nil
	}
	// A shelved instance has no disk files (its root disk is an image
	// under the same secret), a rescued one runs another definition: both
	// rotate once unshelved or unrescued and stopped.
	st, running, err := r.core.InstanceState(ctx, in)
	if err != nil {
		return keyrotation.Result{}, fmt.Errorf("state of %s: %w", in.Name, err)
	}
	if st != "" {
		return keyrotation.Result{Pending: PendingVMState(st)}, nil
	}
	if running {
		return keyrotation.Result{Pending: PendingRunning}, nil
	}
	p := keyrotation.Progress{Total: len(disks)}
	for _, d := range disks {
		if progress != nil {
			progress(p)
		}
		if err := r.rotateDisk(ctx, in, d, gen); err != nil {
			return keyrotation.Result{}, fmt.Errorf("rotate the passphrase of disk %s of %s: %w", d.Name, in.Name, err)
		}
		p.Done++
	}
	if progress != nil {
		progress(p)
	}
	r.log.Info("disk passphrases rotated", "instance", in.Name, "generation", gen, "disks", len(disks))
	return keyrotation.Result{Done: true}, nil
}

// Generation returns the generation the subject's disk passphrases are
// all at: the lowest of its encrypted disks' (0: a disk never rotated —
// its passphrase existed before rotation was tracked, or was made after
// the last rotation), for the Engine's status.
func (r *Rotator) Generation(ctx context.Context, s keyrotation.Subject) (int64, error) {
	if err := r.usable(); err != nil {
		return 0, err
	}
	in, disks, err := r.instanceDisks(ctx, s)
	if err != nil {
		return 0, err
	}
	_, bds, err := r.instanceBlockDevices(ctx, in.Name)
	if err != nil {
		return 0, err
	}
	gen := int64(-1)
	for _, d := range disks {
		if g := bds.Disks[d.Name].KeyGeneration; gen < 0 || g < gen {
			gen = g
		}
	}
	return max(gen, 0), nil
}

// instanceDisks returns the subject's instance (this host's, with the
// subject's UUID) and its encrypted disks with their own secrets.
func (r *Rotator) instanceDisks(ctx context.Context, s keyrotation.Subject) (*model.Instance, []model.Disk, error) {
	in, bds, err := r.instanceBlockDevices(ctx, s.InstanceName)
	if err != nil {
		return nil, nil, fmt.Errorf("rotate disk passphrases: %w", err)
	}
	if s.InstanceUUID != "" && in.UUID != s.InstanceUUID {
		return nil, nil, fmt.Errorf("rotate disk passphrases of %s: %w: the instance has UUID %s, not %s", s.InstanceName, store.ErrNotFound, in.UUID, s.InstanceUUID)
	}
	var disks []model.Disk
	for _, d := range in.Disks {
		if bd, ok := bds.Disks[d.Name]; ok && rotatable(bd) {
			disks = append(disks, d)
		}
	}
	return in, disks, nil
}

// due reports whether the disk still has work for generation gen: below
// it, a journal, or a pending passphrase.
func (r *Rotator) due(ctx context.Context, bd encryption.BlockDevice, gen int64) (bool, error) {
	if bd.KeyGeneration < gen || bd.KeyRotation != nil {
		return true, nil
	}
	return r.keys.HasPending(ctx, bd.EncryptionSecretUUID)
}

// running reports whether in's domain runs.
func (r *Rotator) running(ctx context.Context, in *model.Instance) (bool, error) {
	_, running, err := r.core.InstanceState(ctx, in)
	if err != nil {
		return false, fmt.Errorf("state of %s: %w", in.Name, err)
	}
	return running, nil
}

// disk returns a disk's block-device record (read again: a step changes
// it) and its image's path.
func (r *Rotator) disk(ctx context.Context, in *model.Instance, name string) (encryption.BlockDevice, string, error) {
	_, bds, err := r.instanceBlockDevices(ctx, in.Name)
	if err != nil {
		return encryption.BlockDevice{}, "", err
	}
	bd, ok := bds.Disks[name]
	if !ok || !rotatable(bd) {
		return encryption.BlockDevice{}, "", fmt.Errorf("disk %s of %s: %w: no encrypted disk record", name, in.Name, store.ErrNotFound)
	}
	p, err := r.disks.DiskPath(in, name)
	return bd, p, err
}

// backingPass is the passphrase of the disk's encrypted backing file
// (nil: none), which qemu-img amend and qemu-io need to open the chain.
func (r *Rotator) backingPass(ctx context.Context, bd encryption.BlockDevice) ([]byte, error) {
	if bd.BackingEncryptionSecretUUID == "" {
		return nil, nil
	}
	p, err := r.keys.Passphrase(ctx, bd.BackingEncryptionSecretUUID)
	if err != nil {
		return nil, fmt.Errorf("backing file: %w", err)
	}
	return p, nil
}

// instanceBlockDevices returns this host's instance named name (an error
// wrapping store.ErrNotFound when there is none) and its block-device
// records.
func (r *Rotator) instanceBlockDevices(ctx context.Context, name string) (*model.Instance, encryption.BlockDevices, error) {
	in, err := r.core.OwnInstance(ctx, name)
	if err != nil {
		return nil, encryption.BlockDevices{}, err
	}
	bds, err := r.disks.BlockDevices(ctx, in.UUID)
	if err != nil {
		return nil, encryption.BlockDevices{}, err
	}
	return in, bds, nil
}
