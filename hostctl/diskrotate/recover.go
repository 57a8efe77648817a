package diskrotate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store"
)

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
func (r *Rotator) Recover(ctx context.Context) error {
	if err := r.usable(); err != nil {
		return err
	}
	recs, err := r.disks.HostBlockDevices(ctx)
	var errs []error
	if err != nil {
		errs = append(errs, fmt.Errorf("disk rotation recovery: %w", err))
	}
	for _, uuid := range slices.Sorted(maps.Keys(recs)) {
		s := keyrotation.Subject{Class: keyrotation.Disk, InstanceUUID: uuid, InstanceName: recs[uuid].Instance}
		if err := r.recoverInstance(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (r *Rotator) recoverInstance(ctx context.Context, s keyrotation.Subject) error {
	defer r.core.LockInstance(s.InstanceName)()
	in, disks, err := r.instanceDisks(ctx, s)
	if errors.Is(err, store.ErrNotFound) {
		return nil // gone: the sweep deletes its secrets
	}
	if errkind.Of(err) == errkind.Conflict {
		// Another host's now (a move or an adopt took it over before its
		// block-device records followed): that host recovers it.
		return nil
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
		log := r.log.With("instance", in.Name, "disk", d.Name, "secret", id, "current_opens", curOK, "pending_opens", pendOK, "journal", bd.KeyRotation != nil, "running", *running)
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
			cur, err := r.keys.Passphrase(ctx, id)
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
func (r *Rotator) opens(ctx context.Context, bd encryption.BlockDevice, path string, hasPending bool) (cur, pend bool, err error) {
	backing, err := r.backingPass(ctx, bd)
	if err != nil {
		return false, false, err
	}
	defer clear(backing)
	try := func(p []byte) (bool, error) {
		defer clear(p)
		err := r.luks.Verify(ctx, path, p, backing)
		if errors.Is(err, encryption.ErrWrongPassphrase) {
			return false, nil
		}
		return err == nil, err
	}
	p, err := r.keys.Passphrase(ctx, bd.EncryptionSecretUUID)
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
