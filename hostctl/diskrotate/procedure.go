package diskrotate

import (
	"context"
	"errors"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
)

// rotateDisk brings one disk of a stopped instance (its lock held) to
// generation gen, continuing a rotation its record's journal or a pending
// passphrase says was interrupted.
func (r *Rotator) rotateDisk(ctx context.Context, in *model.Instance, d model.Disk, gen int64) error {
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
func (r *Rotator) begin(ctx context.Context, in *model.Instance, bd encryption.BlockDevice, path string, gen int64) error {
	pass, err := r.keys.SetPending(ctx, bd.EncryptionSecretUUID)
	if err != nil {
		return err
	}
	clear(pass)
	r.step("pending-stored")
	active, err := r.luks.KeySlots(ctx, path)
	if err != nil {
		return err
	}
	slot, err := encryption.FreeKeySlot(active)
	if err != nil {
		return fmt.Errorf("disk %s: %w", bd.Disk, err)
	}
	bd.KeyRotation = &encryption.DiskKeyRotation{Generation: gen, Slot: slot}
	if err := r.disks.SetBlockDevice(ctx, in, bd); err != nil {
		return err
	}
	r.step("slot-chosen")
	return nil
}

// continueRotation runs the rest of the journal's rotation: add the
// pending passphrase to the journal's slot (unless it is active), prove
// it, promote it; then (also when it was promoted before a crash) the
// libvirt secret, the other slots erased, and the record.
func (r *Rotator) continueRotation(ctx context.Context, in *model.Instance, bd encryption.BlockDevice, path string) error {
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
		active, err := r.luks.KeySlots(ctx, path)
		if err != nil {
			return err
		}
		if rot.Slot >= len(active) {
			return fmt.Errorf("disk %s: journal slot %d: the header has %d slots", bd.Disk, rot.Slot, len(active))
		}
		if !active[rot.Slot] {
			cur, err := r.keys.Passphrase(ctx, id)
			if err != nil {
				return err
			}
			err = r.luks.AddKeySlot(ctx, path, rot.Slot, cur, pending, backing)
			clear(cur)
			if err != nil {
				return fmt.Errorf("disk %s: %w", bd.Disk, err)
			}
		}
		r.step("slot-added")
		err = r.luks.Verify(ctx, path, pending, backing)
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
		r.step("verified")
		if err := r.keys.Promote(ctx, id); err != nil && !errors.Is(err, keys.ErrNoPending) {
			return err
		}
		r.step("promoted")
	}
	return r.finish(ctx, in, bd, path, backing)
}

// rewriteSlot erases key slot slot and adds pending to it again,
// unlocking with the current passphrase (which must open the disk), then
// proves pending opens the disk.
func (r *Rotator) rewriteSlot(ctx context.Context, bd encryption.BlockDevice, path string, slot int, pending, backing []byte) error {
	cur, err := r.keys.Passphrase(ctx, bd.EncryptionSecretUUID)
	if err != nil {
		return err
	}
	defer clear(cur)
	if err := r.luks.Verify(ctx, path, cur, backing); err != nil {
		return fmt.Errorf("the current passphrase does not open the disk either: %w", err)
	}
	r.log.Warn("disk passphrase rotation: the new key slot does not hold the pending passphrase; rewriting it", "disk", bd.Disk, "secret", bd.EncryptionSecretUUID, "key_slot", slot)
	if err := r.luks.EraseKeySlot(ctx, path, slot, cur, backing); err != nil {
		return err
	}
	if err := r.luks.AddKeySlot(ctx, path, slot, cur, pending, backing); err != nil {
		return err
	}
	return r.luks.Verify(ctx, path, pending, backing)
}

// finish runs the steps after the promotion: prove the (new) current
// passphrase opens the disk, hand it to a libvirt secret defined for the
// disk, erase every other active slot, record the generation and slot.
func (r *Rotator) finish(ctx context.Context, in *model.Instance, bd encryption.BlockDevice, path string, backing []byte) error {
	id, rot := bd.EncryptionSecretUUID, *bd.KeyRotation
	cur, err := r.keys.Passphrase(ctx, id)
	if err != nil {
		return err
	}
	defer clear(cur)
	if err := r.luks.Verify(ctx, path, cur, backing); err != nil {
		return fmt.Errorf("disk %s: after the promotion the current passphrase does not open the disk (no key slot erased): %w", bd.Disk, err)
	}
	if err := r.updateLibvirtSecret(ctx, in, bd.Disk, id, cur); err != nil {
		return err
	}
	r.step("libvirt-updated")
	active, err := r.luks.KeySlots(ctx, path)
	if err != nil {
		return err
	}
	if rot.Slot >= len(active) || !active[rot.Slot] {
		return fmt.Errorf("disk %s: key slot %d of the new passphrase is not active (no key slot erased)", bd.Disk, rot.Slot)
	}
	for i, a := range active {
		if a && i != rot.Slot {
			if err := r.luks.EraseKeySlot(ctx, path, i, cur, backing); err != nil {
				return fmt.Errorf("disk %s: %w", bd.Disk, err)
			}
		}
	}
	r.step("old-erased")
	slot := rot.Slot
	bd.KeyGeneration, bd.KeySlot, bd.KeyRotation = max(bd.KeyGeneration, rot.Generation), &slot, nil
	if err := r.disks.SetBlockDevice(ctx, in, bd); err != nil {
		return err
	}
	r.step("recorded")
	r.log.Info("disk passphrase rotated", "instance", in.Name, "disk", bd.Disk, "secret", id, "generation", bd.KeyGeneration, "key_slot", slot)
	return nil
}

// updateLibvirtSecret gives the libvirt secret of the disk, if one is
// defined, the value pass (redefined on the same UUID and usage).
func (r *Rotator) updateLibvirtSecret(ctx context.Context, in *model.Instance, disk, id string, pass []byte) error {
	updated, err := r.disks.UpdateLibvirtSecret(ctx, in, disk, id, pass)
	if err != nil {
		return fmt.Errorf("disk %s: %w", disk, err)
	}
	if updated {
		r.log.Info("libvirt secret of a rotated disk updated", "instance", in.Name, "disk", disk, "secret", id)
	}
	return nil
}
