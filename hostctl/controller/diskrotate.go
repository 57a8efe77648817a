package controller

// Disk passphrase rotation (issue 10: class keyrotation.Disk, one subject
// per instance), in place through LUKS key slots — no data is
// re-encrypted.
//
// Per encrypted disk of a stopped instance (root, ephemeral, swap and
// every other LUKS disk), to generation G:
//
//	pending-stored   a new passphrase is persisted, wrapped, as the secret's pending one (keys.SetPending)
//	slot-chosen      a free LUKS key slot N is chosen (qemu-img info) and recorded with G in the
//	                 disk's block-device record (its key_rotation journal)
//	slot-added       the pending passphrase is added to slot N (qemu-img amend, unlocking with the current one)
//	verified         the pending passphrase is proven to open the disk (qemu-io read)
//	promoted         it becomes the current one in the key manager (keys.Promote: one record write)
//	libvirt-updated  a libvirt secret defined for the disk gets the new value (same UUID: libvirt allows
//	                 one secret per usage id, so there is no secret per generation)
//	old-erased       every other active key slot is erased (unlocking with the new passphrase)
//	recorded         the record gets key_generation G and key_slot N, the journal is dropped
//
// At every step one stored passphrase opens the disk: until promoted the
// current one (its slot is erased only after the promotion), from then
// on the new one (in slot N, verified before the promotion). A Rotate
// called again after a crash or an error continues from the record: an
// existing pending passphrase is reused (never a second one for G), a
// slot already written is not written again, and after the promotion
// only the last steps run. Disk passphrases rotate in place: prior
// passphrases are never kept (keyrotation.Policy.Check refuses
// keepPriorKeyCount for this class), so every old slot is erased.
//
// Not rotated: the encrypted backing file of a disk over an encrypted
// image (backing_encryption_secret_uuid) — it is the image's file, shared
// by every instance made from it; its passphrase is the image's and
// rotates with the image. Its copy is only used to open the chain.
//
// A running instance's disks are not rotated (qemu-img amend needs the
// image unlocked by any QEMU; live amend through QMP x-blockdev-amend is
// still experimental in QEMU 7.2 and not used): Rotate reports it pending
// and the next call after it stops rotates it. Rotate holds the
// instance's lock, so the instance cannot start in the middle.
//
// Wiring (hostctl/daemon, with the keyrotation Engine):
//
//	ctl := controller.NewStopped(ctlStore, opts) // New without the reconciler
//	keyEngine.Register(keyrotation.Disk, controller.NewDiskRotator(ctl))
//	if err := keyEngine.Recover(ctx); err != nil { … } // runs DiskRotator.Recover
//	ctl.StartReconciler()
//
// The key rotation records of an instance (its policy and status,
// keyrotation/<host>/…/disk-passphrases/<uuid>) go with it: the daemon
// installs Engine.ForgetInstance with SetKeyRotationForget, which Delete
// and ForceDeleteFromStore call once the record is gone.
//
// Recover must run before anything starts an instance (the API is not
// served yet); with controller.New the reconciler runs alongside it,
// which is safe (both take the instance's lock, and the reconciler only
// removes libvirt secrets of stopped domains) but NewStopped keeps the
// order the design asks for. The DiskRotator is the class's Rotator,
// Lister (Subjects: this host's instances with encrypted disks, Created
// = the oldest disk's creation) and Recoverer. NewDiskRotator needs the
// controller's key manager to be *keys.Manager (or any KeyManager with
// PendingKeys) and its LUKS tool *encryption.Tool (or any LUKS with
// KeySlotter); otherwise its methods return ErrNoRotation.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/crashpoint"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// DiskRotateProc names the disk passphrase rotation procedure for
// internal/crashpoint.
const DiskRotateProc = "disk-rotate"

// The steps of the procedure, in order (crashpoint names).
var _ = crashpoint.Declare(DiskRotateProc,
	"pending-stored", "slot-chosen", "slot-added", "verified", "promoted", "libvirt-updated", "old-erased", "recorded")

func hitDisk(step string) { crashpoint.Hit(crashpoint.Name(DiskRotateProc, step)) }

// PendingVMState is the Result.Pending of a shelved or rescued instance.
func PendingVMState(state string) string {
	return "instance " + state + ": its disks rotate when it is back and stopped"
}

// PendingRunning is the Result.Pending of a running instance.
const PendingRunning = "instance running: its disks rotate when it next stops"

// PendingKeys is the key manager's pending passphrase of a rotation
// (internal/keys).
type PendingKeys interface {
	SetPending(ctx context.Context, id string) ([]byte, error)
	Pending(ctx context.Context, id string) ([]byte, error)
	HasPending(ctx context.Context, id string) (bool, error)
	Promote(ctx context.Context, id string) error
	DropPending(ctx context.Context, id string) error
}

var _ PendingKeys = (*keys.Manager)(nil)

// KeySlotter manages the key slots of LUKS images (hostctl/encryption).
type KeySlotter interface {
	KeySlots(ctx context.Context, path string) ([]bool, error)
	AddKeySlot(ctx context.Context, path string, slot int, cur, next, backing []byte) error
	EraseKeySlot(ctx context.Context, path string, slot int, keep, backing []byte) error
}

var _ KeySlotter = (*encryption.Tool)(nil)

// DiskRotator rotates the LUKS passphrases of the controller's instances:
// keyrotation.Rotator, Recoverer and Lister for keyrotation.Disk.
type DiskRotator struct {
	c     *Controller
	keys  PendingKeys
	slots KeySlotter
}

var (
	_ keyrotation.Rotator         = (*DiskRotator)(nil)
	_ keyrotation.Recoverer       = (*DiskRotator)(nil)
	_ keyrotation.Lister          = (*DiskRotator)(nil)
	_ keyrotation.Generationer    = (*DiskRotator)(nil)
	_ keyrotation.InstanceChecker = (*DiskRotator)(nil)
)

// ErrNoRotation: the controller cannot rotate disk passphrases (no key
// manager, no record store, or parts without pending passphrases or key
// slots).
var ErrNoRotation = errors.New("disk passphrase rotation unavailable")

// NewDiskRotator returns the disk passphrase rotator of c. Its methods
// return ErrNoRotation when c has no key manager or record store.
func NewDiskRotator(c *Controller) *DiskRotator {
	r := &DiskRotator{c: c}
	r.keys, _ = c.keys.(PendingKeys)
	r.slots, _ = c.luks.(KeySlotter)
	return r
}

func (r *DiskRotator) usable() error {
	if r.c.keys == nil || r.c.records == nil || r.keys == nil || r.slots == nil {
		return fmt.Errorf("%w: this hostctl has no key manager with pending passphrases, record store or LUKS key slot tool", ErrNoRotation)
	}
	return nil
}

// Subjects lists this host's instances with encrypted disks.
func (r *DiskRotator) Subjects(ctx context.Context) ([]keyrotation.Subject, error) {
	if err := r.usable(); err != nil {
		return nil, err
	}
	recs, err := r.c.records.Records(ctx, blockDevPrefix)
	if err != nil {
		return nil, fmt.Errorf("disk rotation subjects: %w", err)
	}
	var out []keyrotation.Subject
	for _, sr := range recs {
		rec, err := encryption.DecodeBlockDevices(sr.Value)
		if err != nil {
			return nil, fmt.Errorf("disk rotation subjects: %s: %w", sr.Key, err)
		}
		uuid := strings.TrimPrefix(sr.Key, blockDevPrefix)
		if rec.Host != r.c.hostName || !slices.ContainsFunc(mapValues(rec.Disks), rotatable) {
			continue
		}
		if ir, err := r.c.store.Instance(ctx, rec.Instance); err != nil || ir.UUID != uuid {
			continue // gone (the sweep deletes the record)
		}
		s := keyrotation.Subject{Class: keyrotation.Disk, InstanceUUID: uuid, InstanceName: rec.Instance}
		for _, bd := range rec.Disks {
			// When its keys were made: the oldest disk's creation.
			if rotatable(bd) && !bd.Created.IsZero() && (s.Created.IsZero() || bd.Created.Before(s.Created)) {
				s.Created = bd.Created
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// InstanceExists implements keyrotation.InstanceChecker: whether an
// instance with the UUID is in the store (on any host), so the key
// rotation engine deletes only the records of instances that are gone.
func (r *DiskRotator) InstanceExists(ctx context.Context, uuid string) (bool, error) {
	recs, err := r.c.store.Instances(ctx)
	if err != nil {
		return false, fmt.Errorf("instances: %w", err)
	}
	return slices.ContainsFunc(recs, func(rec store.Instance) bool { return strings.EqualFold(rec.UUID, uuid) }), nil
}

func mapValues(m map[string]encryption.BlockDevice) []encryption.BlockDevice {
	out := make([]encryption.BlockDevice, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// rotatable: an encrypted disk with its own key-manager secret.
func rotatable(bd encryption.BlockDevice) bool { return bd.Encrypted && bd.EncryptionSecretUUID != "" }

// Rotate rotates the passphrases of every encrypted disk of the subject's
// instance to generation gen (see the procedure above). keep must be 0:
// disk passphrases rotate in place. A running instance is not touched
// unless its disks are at gen already: Result{Pending: PendingRunning}.
func (r *DiskRotator) Rotate(ctx context.Context, s keyrotation.Subject, gen int64, keep int, progress func(keyrotation.Progress)) (keyrotation.Result, error) {
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
	defer r.c.locks.Lock(s.InstanceName)()
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
	// rotate once unshelved or unrescued and stopped (vmstate.go).
	if st, _, err := r.c.vmStateOf(ctx, in.UUID); err != nil {
		return keyrotation.Result{}, err
	} else if st.State != "" {
		return keyrotation.Result{Pending: PendingVMState(st.State)}, nil
	}
	running, err := r.running(ctx, in)
	if err != nil {
		return keyrotation.Result{}, err
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
	r.c.log.Info("disk passphrases rotated", "instance", in.Name, "generation", gen, "disks", len(disks))
	return keyrotation.Result{Done: true}, nil
}

// Generation returns the generation the subject's disk passphrases are
// all at: the lowest of its encrypted disks' (0: a disk never rotated —
// its passphrase existed before rotation was tracked, or was made after
// the last rotation), for the Engine's status.
func (r *DiskRotator) Generation(ctx context.Context, s keyrotation.Subject) (int64, error) {
	if err := r.usable(); err != nil {
		return 0, err
	}
	in, disks, err := r.instanceDisks(ctx, s)
	if err != nil {
		return 0, err
	}
	bds, _, err := r.c.loadBlockDevices(ctx, in.UUID)
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
func (r *DiskRotator) instanceDisks(ctx context.Context, s keyrotation.Subject) (*model.Instance, []model.Disk, error) {
	rec, err := r.c.ownRecord(ctx, "rotate disk passphrases of", s.InstanceName)
	if err != nil {
		return nil, nil, err
	}
	if s.InstanceUUID != "" && rec.UUID != s.InstanceUUID {
		return nil, nil, fmt.Errorf("rotate disk passphrases of %s: %w: the instance has UUID %s, not %s", s.InstanceName, store.ErrNotFound, rec.UUID, s.InstanceUUID)
	}
	in, err := decodeSpec(rec)
	if err != nil {
		return nil, nil, err
	}
	bds, _, err := r.c.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		return nil, nil, err
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
func (r *DiskRotator) due(ctx context.Context, bd encryption.BlockDevice, gen int64) (bool, error) {
	if bd.KeyGeneration < gen || bd.KeyRotation != nil {
		return true, nil
	}
	return r.keys.HasPending(ctx, bd.EncryptionSecretUUID)
}

func (r *DiskRotator) running(ctx context.Context, in *model.Instance) (bool, error) {
	if r.c.domains == nil {
		return false, nil
	}
	cur, err := r.c.currentDomain(ctx, in.Name)
	if err != nil {
		return false, fmt.Errorf("state of %s: %w", in.Name, err)
	}
	return cur != nil && cur.uuid == in.UUID && cur.running, nil
}

// disk returns a disk's block-device record and its image's path.
func (r *DiskRotator) disk(ctx context.Context, in *model.Instance, name string) (encryption.BlockDevice, string, error) {
	bds, _, err := r.c.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		return encryption.BlockDevice{}, "", err
	}
	bd, ok := bds.Disks[name]
	if !ok || !rotatable(bd) {
		return encryption.BlockDevice{}, "", fmt.Errorf("disk %s of %s: %w: no encrypted disk record", name, in.Name, store.ErrNotFound)
	}
	for _, d := range in.Disks {
		if d.Name == name {
			p, err := virt.ResolveInDataDir(r.c.dataDir, filepath.Join("instances", in.Name, diskFileOf(d)))
			return bd, p, err
		}
	}
	return encryption.BlockDevice{}, "", fmt.Errorf("disk %s of %s: %w: not in the spec", name, in.Name, store.ErrNotFound)
}

// setRecord rewrites one disk's block-device record.
func (r *DiskRotator) setRecord(ctx context.Context, in *model.Instance, bd encryption.BlockDevice) error {
	return r.c.updateBlockDevices(ctx, nil, in, map[string]*encryption.BlockDevice{bd.Disk: &bd})
}

// backingPass is the passphrase of the disk's encrypted backing file
// (nil: none), which qemu-img amend and qemu-io need to open the chain.
func (r *DiskRotator) backingPass(ctx context.Context, bd encryption.BlockDevice) ([]byte, error) {
	if bd.BackingEncryptionSecretUUID == "" {
		return nil, nil
	}
	p, err := r.c.keys.Passphrase(ctx, bd.BackingEncryptionSecretUUID)
	if err != nil {
		return nil, fmt.Errorf("backing file: %w", err)
	}
	return p, nil
}

// rotateDisk brings one disk of a stopped instance (its lock held) to
// generation gen, continuing a rotation its record's journal or a pending
// passphrase says was interrupted.
func (r *DiskRotator) rotateDisk(ctx context.Context, in *model.Instance, d model.Disk, gen int64) error {
	// At most: finish an interrupted rotation, begin one, run it, and
	// see it done.
	for range 4 {
		bd, path, err := r.disk(ctx, in, d.Name)
		if err != nil {
			return err
		}
		id := bd.EncryptionSecretUUID
		if bd.KeyRotation == nil {
			if bd.KeyGeneration >= gen {
				// At gen: a pending passphrase left over from a start
				// that never reached its journal is dropped (it opens
				// nothing).
				return r.keys.DropPending(ctx, id)
			}
			if err := r.begin(ctx, in, bd, path, gen); err != nil {
				return err
			}
			continue
		}
		if err := r.continueRotation(ctx, in, bd, path); err != nil {
			return err
		}
	}
	return fmt.Errorf("disk %s: the rotation to generation %d makes no progress (its journal stays)", d.Name, gen)
}

// begin starts a rotation of one disk to gen: the pending passphrase (an
// existing one reused), then a free slot, recorded in the journal.
func (r *DiskRotator) begin(ctx context.Context, in *model.Instance, bd encryption.BlockDevice, path string, gen int64) error {
	pass, err := r.keys.SetPending(ctx, bd.EncryptionSecretUUID)
	if err != nil {
		return err
	}
	clear(pass)
	hitDisk("pending-stored")
	active, err := r.slots.KeySlots(ctx, path)
	if err != nil {
		return err
	}
	slot, err := encryption.FreeKeySlot(active)
	if err != nil {
		return fmt.Errorf("disk %s: %w", bd.Disk, err)
	}
	bd.KeyRotation = &encryption.DiskKeyRotation{Generation: gen, Slot: slot}
	if err := r.setRecord(ctx, in, bd); err != nil {
		return err
	}
	hitDisk("slot-chosen")
	return nil
}

// continueRotation runs the rest of the journal's rotation: add the
// pending passphrase to the journal's slot (unless it is active), prove
// it, promote it; then (also when it was promoted before a crash) the
// libvirt secret, the other slots erased, and the record.
func (r *DiskRotator) continueRotation(ctx context.Context, in *model.Instance, bd encryption.BlockDevice, path string) error {
	id, rot := bd.EncryptionSecretUUID, *bd.KeyRotation
	backing, err := r.backingPass(ctx, bd)
	if err != nil {
		return err
	}
	defer clear(backing)
	pending, err := r.keys.Pending(ctx, id)
	switch {
	case errors.Is(err, keys.ErrNoPending):
		// Promoted before an interruption: finish below.
	case err != nil:
		return err
	default:
		defer clear(pending)
		active, err := r.slots.KeySlots(ctx, path)
		if err != nil {
			return err
		}
		if rot.Slot >= len(active) {
			return fmt.Errorf("disk %s: journal slot %d: the header has %d slots", bd.Disk, rot.Slot, len(active))
		}
		if !active[rot.Slot] {
			cur, err := r.c.keys.Passphrase(ctx, id)
			if err != nil {
				return err
			}
			err = r.slots.AddKeySlot(ctx, path, rot.Slot, cur, pending, backing)
			clear(cur)
			if err != nil {
				return fmt.Errorf("disk %s: %w", bd.Disk, err)
			}
		}
		hitDisk("slot-added")
		err = r.c.luks.Verify(ctx, path, pending, backing)
		if errors.Is(err, encryption.ErrWrongPassphrase) {
			// Slot N is active without the pending passphrase (an amend
			// cut short by a power loss): rewrite it, unlocking with the
			// current passphrase, which is in another slot (N was free
			// when chosen) and is proven to open the disk first.
			err = r.rewriteSlot(ctx, bd, path, rot.Slot, pending, backing)
		}
		if err != nil {
			// Slot N is active but the pending passphrase does not open
			// the disk: nothing is promoted or erased; the current
			// passphrase still opens it.
			return fmt.Errorf("disk %s: the new passphrase in key slot %d does not open the disk (nothing erased, the current passphrase still opens it): %w", bd.Disk, rot.Slot, err)
		}
		hitDisk("verified")
		if err := r.keys.Promote(ctx, id); err != nil && !errors.Is(err, keys.ErrNoPending) {
			return err
		}
		hitDisk("promoted")
	}
	return r.finish(ctx, in, bd, path, backing)
}

// rewriteSlot erases key slot slot and adds pending to it again,
// unlocking with the current passphrase (which must open the disk), then
// proves pending opens the disk.
func (r *DiskRotator) rewriteSlot(ctx context.Context, bd encryption.BlockDevice, path string, slot int, pending, backing []byte) error {
	cur, err := r.c.keys.Passphrase(ctx, bd.EncryptionSecretUUID)
	if err != nil {
		return err
	}
	defer clear(cur)
	if err := r.c.luks.Verify(ctx, path, cur, backing); err != nil {
		return fmt.Errorf("the current passphrase does not open the disk either: %w", err)
	}
	r.c.log.Warn("disk passphrase rotation: the new key slot does not hold the pending passphrase; rewriting it", "disk", bd.Disk, "secret", bd.EncryptionSecretUUID, "key_slot", slot)
	if err := r.slots.EraseKeySlot(ctx, path, slot, cur, backing); err != nil {
		return err
	}
	if err := r.slots.AddKeySlot(ctx, path, slot, cur, pending, backing); err != nil {
		return err
	}
	return r.c.luks.Verify(ctx, path, pending, backing)
}

// finish runs the steps after the promotion: prove the (new) current
// passphrase opens the disk, hand it to a libvirt secret defined for the
// disk, erase every other active slot, record the generation and slot.
func (r *DiskRotator) finish(ctx context.Context, in *model.Instance, bd encryption.BlockDevice, path string, backing []byte) error {
	id, rot := bd.EncryptionSecretUUID, *bd.KeyRotation
	cur, err := r.c.keys.Passphrase(ctx, id)
	if err != nil {
		return err
	}
	defer clear(cur)
	if err := r.c.luks.Verify(ctx, path, cur, backing); err != nil {
		return fmt.Errorf("disk %s: after the promotion the current passphrase does not open the disk (no key slot erased): %w", bd.Disk, err)
	}
	if err := r.updateLibvirtSecret(ctx, in, bd.Disk, id, cur); err != nil {
		return err
	}
	hitDisk("libvirt-updated")
	active, err := r.slots.KeySlots(ctx, path)
	if err != nil {
		return err
	}
	if rot.Slot >= len(active) || !active[rot.Slot] {
		return fmt.Errorf("disk %s: key slot %d of the new passphrase is not active (no key slot erased)", bd.Disk, rot.Slot)
	}
	for i, a := range active {
		if a && i != rot.Slot {
			if err := r.slots.EraseKeySlot(ctx, path, i, cur, backing); err != nil {
				return fmt.Errorf("disk %s: %w", bd.Disk, err)
			}
		}
	}
	hitDisk("old-erased")
	slot := rot.Slot
	bd.KeyGeneration, bd.KeySlot, bd.KeyRotation = max(bd.KeyGeneration, rot.Generation), &slot, nil
	if err := r.setRecord(ctx, in, bd); err != nil {
		return err
	}
	hitDisk("recorded")
	r.c.log.Info("disk passphrase rotated", "instance", in.Name, "disk", bd.Disk, "secret", id, "generation", bd.KeyGeneration, "key_slot", slot)
	return nil
}

// updateLibvirtSecret gives the libvirt secret of the disk, if one is
// defined, the value pass (redefined on the same UUID and usage).
func (r *DiskRotator) updateLibvirtSecret(ctx context.Context, in *model.Instance, disk, id string, pass []byte) error {
	if r.c.libvirtSecrets == nil {
		return nil
	}
	usage := r.c.secretUsage(in.UUID, disk)
	ss, err := r.c.libvirtSecrets.Secrets(ctx, usage)
	if err != nil {
		return fmt.Errorf("disk %s: libvirt secrets: %w", disk, err)
	}
	for _, s := range ss {
		if s.UUID == id {
			if err := r.c.libvirtSecrets.DefineSecret(ctx, virt.LibvirtSecret{UUID: id, Usage: usage}, pass); err != nil {
				return fmt.Errorf("disk %s: update libvirt secret %s: %w", disk, id, err)
			}
			r.c.log.Info("libvirt secret of a rotated disk updated", "instance", in.Name, "disk", disk, "secret", id)
		}
	}
	return nil
}

// Recover finishes or redoes the disk passphrase rotations a crash
// interrupted; call it at start-up, before the reconciler or the Engine
// acts on any instance. For every disk of this host with a pending
// passphrase or a rotation journal it checks which of the current and
// the pending passphrase open the disk (qemu-io):
//
//   - neither: reported (logged at error level, and in the returned
//     error); nothing is changed or deleted;
//   - the instance is stopped: the rotation is continued (only current
//     opens: from adding the slot; both, or only pending: from the
//     promotion; promoted already: the libvirt secret and the erase);
//   - the instance runs: a pending passphrase proven to open the disk is
//     promoted and a defined libvirt secret given the current value; the
//     key slots are changed when it next stops (Rotate).
//
// A pending passphrase without a journal never reached a key slot: it is
// left for the next Rotate, which reuses it.
func (r *DiskRotator) Recover(ctx context.Context) error {
	if err := r.usable(); err != nil {
		return err
	}
	recs, err := r.c.records.Records(ctx, blockDevPrefix)
	if err != nil {
		return fmt.Errorf("disk rotation recovery: %w", err)
	}
	var errs []error
	for _, sr := range recs {
		rec, err := encryption.DecodeBlockDevices(sr.Value)
		if err != nil {
			errs = append(errs, fmt.Errorf("disk rotation recovery: %s: %w", sr.Key, err))
			continue
		}
		if rec.Host != r.c.hostName {
			continue
		}
		uuid := strings.TrimPrefix(sr.Key, blockDevPrefix)
		if err := r.recoverInstance(ctx, keyrotation.Subject{Class: keyrotation.Disk, InstanceUUID: uuid, InstanceName: rec.Instance}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (r *DiskRotator) recoverInstance(ctx context.Context, s keyrotation.Subject) error {
	defer r.c.locks.Lock(s.InstanceName)()
	in, disks, err := r.instanceDisks(ctx, s)
	if errors.Is(err, store.ErrNotFound) {
		return nil // gone: the sweep deletes its secrets
	}
	if err != nil {
		return fmt.Errorf("disk rotation recovery: %w", err)
	}
	var running *bool
	var errs []error
	for _, d := range disks {
		bd, path, err := r.disk(ctx, in, d.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		id := bd.EncryptionSecretUUID
		hasPending, err := r.keys.HasPending(ctx, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !hasPending && bd.KeyRotation == nil {
			continue
		}
		if running == nil {
			run, err := r.running(ctx, in)
			if err != nil {
				return fmt.Errorf("disk rotation recovery: %w", err)
			}
			running = &run
		}
		curOK, pendOK, err := r.opens(ctx, bd, path, hasPending)
		if err != nil {
			errs = append(errs, fmt.Errorf("disk rotation recovery: disk %s of %s: %w", d.Name, in.Name, err))
			continue
		}
		log := r.c.log.With("instance", in.Name, "disk", d.Name, "secret", id, "current_opens", curOK, "pending_opens", pendOK, "journal", bd.KeyRotation != nil, "running", *running)
		if !curOK && !pendOK {
			log.Error("disk passphrase rotation: no stored passphrase opens the disk; nothing changed or deleted (restore the key manager's records or the disk from a backup)")
			errs = append(errs, fmt.Errorf("disk rotation recovery: disk %s of %s (secret %s): neither the current nor the pending passphrase opens it", d.Name, in.Name, id))
			continue
		}
		if bd.KeyRotation == nil {
			log.Info("disk passphrase rotation: a pending passphrase that never reached a key slot; the next rotation reuses it")
			continue
		}
		if !*running {
			log.Info("disk passphrase rotation interrupted; finishing it")
			if err := r.rotateDisk(ctx, in, d, bd.KeyRotation.Generation); err != nil {
				errs = append(errs, fmt.Errorf("disk rotation recovery: disk %s of %s: %w", d.Name, in.Name, err))
			}
			continue
		}
		log.Info("disk passphrase rotation interrupted on a running instance; its key slots change when it next stops")
		if pendOK {
			if err := r.keys.Promote(ctx, id); err != nil && !errors.Is(err, keys.ErrNoPending) {
				errs = append(errs, err)
				continue
			}
		}
		if pendOK || !hasPending {
			cur, err := r.c.keys.Passphrase(ctx, id)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			err = r.updateLibvirtSecret(ctx, in, d.Name, id, cur)
			clear(cur)
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// opens reports which of the disk's current and pending passphrases open
// it (qemu-io, read-only, shared: also while QEMU runs).
func (r *DiskRotator) opens(ctx context.Context, bd encryption.BlockDevice, path string, hasPending bool) (cur, pend bool, err error) {
	backing, err := r.backingPass(ctx, bd)
	if err != nil {
		return false, false, err
	}
	defer clear(backing)
	try := func(p []byte) (bool, error) {
		defer clear(p)
		err := r.c.luks.Verify(ctx, path, p, backing)
		if errors.Is(err, encryption.ErrWrongPassphrase) {
			return false, nil
		}
		return err == nil, err
	}
	p, err := r.c.keys.Passphrase(ctx, bd.EncryptionSecretUUID)
	if err != nil {
		return false, false, err
	}
	if cur, err = try(p); err != nil {
		return false, false, err
	}
	if hasPending {
		p, err := r.keys.Pending(ctx, bd.EncryptionSecretUUID)
		if err != nil {
			return false, false, err
		}
		if pend, err = try(p); err != nil {
			return false, false, err
		}
	}
	return cur, pend, nil
}

// KeyRotationForget deletes the key rotation records of a deleted
// instance of host (keyrotation.Engine.ForgetInstance).
type KeyRotationForget func(ctx context.Context, host, uuid string) error

// keyForgetPtr is the controller's field type (set while the reconciler
// may run).
type keyForgetPtr = atomic.Pointer[KeyRotationForget]

// SetKeyRotationForget installs what deletes a deleted instance's key
// rotation records (nil removes it). The daemon calls it once, with the
// disk rotator's registration.
func (c *Controller) SetKeyRotationForget(f KeyRotationForget) {
	if f == nil {
		c.keyForget.Store(nil)
		return
	}
	c.keyForget.Store(&f)
}

// forgetKeyRotation deletes the key rotation records of rec, whose
// record is gone. A failure is logged: the records name an instance
// that no longer exists, and the key rotation engine's sweep deletes
// them on a later run.
func (c *Controller) forgetKeyRotation(ctx context.Context, rec store.Instance) {
	f := c.keyForget.Load()
	if f == nil {
		return
	}
	if err := (*f)(context.WithoutCancel(ctx), rec.Host, rec.UUID); err != nil {
		c.log.Warn("key rotation records of a deleted instance not deleted (the key rotation sweep retries)", "name", rec.Name, "uuid", rec.UUID, "err", err)
	}
}
