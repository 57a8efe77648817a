package disks

// One rule for every deletion of a key-manager secret (issue 20, item 1):
// a secret goes only when nothing names it any more — no image of the
// catalog (its os_encrypt_key_id: an imported image, a snapshot, a
// shelved instance's image), no disk or backing file of any instance's
// block-device records (any host's: the records are in the store), no
// rescued instance (its rescue disk opens with the rescue image's
// secret), no pending passphrase rotation, and no existing instance that
// owns it as a disk's. A refusal is keys.ErrInUse (409) naming every
// holder.
//
// Every path that deletes a secret — an instance or disk deleted, a
// replaced or flattened disk, the reconciler's sweep, an undo step, and
// through ReleaseSecret hostctl/catalog's `secret
// delete` and an image deleted with os_encrypt_key_deletion_policy
// on_image_deletion — calls deleteSecret, the only caller of the key
// manager's Delete. What the caller is in the middle of releasing (the
// disks of an instance being deleted, the image being deleted) is said in
// a secretRelease, so the holder being removed does not keep its own
// secret.
//
// The rule is the disks part's: the block-device records are its own;
// what else may name a secret (the instances' state records, rescue
// disks, and the instances a secret was made for) it reads through
// Holders (the states part) and Options.Instances (the store).
//
// Deletions and the steps that make something name an existing secret
// (an image import naming os_encrypt_key_id, a snapshot, a rescue) hold
// the secret's lock (LockSecret, which the catalog and the operations
// take too) over the check and the act, so on this host nothing starts naming a
// secret between the check and the delete. Image directories are per
// host: an image of another host's directory is not seen (that host's own
// deletions check it).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store"
)

// ErrNoKeyManager: the host has no key manager.
var ErrNoKeyManager = errkind.New(errkind.Unsupported, "this hostctl has no key manager")

func isStoreNotFound(err error) bool { return err != nil && errors.Is(err, store.ErrNotFound) }

// secretRelease is what a deletion is releasing: those holders do not
// keep the secret.
type secretRelease struct {
	// image is an image being deleted.
	image string
	// instanceUUID is an instance whose disks are being removed (or
	// replaced): its ownership of the secret (keys.Owner) does not count,
	// nor a pending rotation of it.
	instanceUUID string
	// disks of that instance being removed: their block-device records do
	// not count. allDisks: every disk, the rescue disk and the state
	// record (the instance is deleted).
	disks    []string
	allDisks bool
}

func (r secretRelease) releasesDisk(instUUID, disk string) bool {
	return r.instanceUUID != "" && strings.EqualFold(instUUID, r.instanceUUID) && (r.allDisks || slices.Contains(r.disks, disk))
}

// pendingChecker is the key manager's view of a rotation in progress
// (internal/keys: a pending passphrase).
type pendingChecker interface {
	HasPending(ctx context.Context, id string) (bool, error)
}

// secretHolders returns what names the secret id, except what rel
// releases, as phrases for an error ("image enc-b", "disk vda of instance
// web"), sorted.
func (pt *Part) secretHolders(ctx context.Context, id string, rel secretRelease) ([]string, error) {
	var out []string
	released := map[string]bool{}
	if rel.image != "" {
		released[rel.image] = true
	}
	states := map[string]State{}
	if pt.Records != nil && pt.states != nil {
		var err error
		if states, err = pt.states.Summaries(ctx); err != nil {
			return nil, err
		}
		for uuid, st := range states {
			if rel.allDisks && strings.EqualFold(uuid, rel.instanceUUID) && st.ShelvedImage != "" {
				released[st.ShelvedImage] = true // deleted with the instance
			}
		}
	}
	// Images of this host's catalog (snapshots and shelved images are
	// images too).
	if dir := pt.Catalog; dir != nil {
		imgs, err := dir.NamingSecret(ctx, id)
		if err != nil {
			return nil, err
		}
		for _, n := range imgs {
			if !released[n] {
				out = append(out, "image "+n)
			}
		}
	}
	// Disks, backing files and rescue disks of every instance with
	// block-device records.
	if pt.Records != nil {
		recs, err := pt.Records.Records(ctx, blockDevPrefix)
		if err != nil {
			return nil, fmt.Errorf("block devices: %w", err)
		}
		for _, sr := range recs {
			rec, err := encryption.DecodeBlockDevices(sr.Value)
			if err != nil {
				return nil, fmt.Errorf("block-device record %s: %w", sr.Key, err)
			}
			uuid := strings.TrimPrefix(sr.Key, blockDevPrefix)
			inst := rec.Instance
			if inst == "" {
				inst = uuid
			}
			if st := states[uuid].State; st != "" {
				inst += " (" + st + ")"
			}
			for disk, bd := range rec.Disks {
				if rel.releasesDisk(uuid, disk) {
					continue
				}
				what := "disk " + disk
				if disk == RescueDisk {
					what = "rescue disk"
				}
				if bd.EncryptionSecretUUID == id {
					out = append(out, what+" of instance "+inst)
				}
				if bd.BackingEncryptionSecretUUID == id && bd.BackingEncryptionSecretUUID != bd.EncryptionSecretUUID {
					out = append(out, "backing file of "+what+" of instance "+inst)
				}
			}
		}
		// A rescued instance's rescue disk opens with the rescue image's
		// own secret (hostctl/ops, rescue.go).
		for uuid, st := range states {
			if st.RescueSecret == id && !rel.releasesDisk(uuid, RescueDisk) {
				out = append(out, "rescue disk of instance "+st.Instance+" (rescue image "+st.RescueImage+")")
			}
		}
	}
	if pt.Keys != nil {
		s, err := pt.Keys.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		// The instance a disk's secret was made for, while it exists.
		if o := s.Owner; o != nil && o.InstanceName != "" && !strings.EqualFold(o.InstanceUUID, rel.instanceUUID) {
			if rec, err := pt.Instances.Instance(ctx, o.InstanceName); err == nil && rec.UUID == o.InstanceUUID {
				out = append(out, fmt.Sprintf("disk %s of instance %s (made for it)", o.Disk, o.InstanceName))
			} else if err != nil && !isStoreNotFound(err) {
				return nil, err
			}
		}
		// A passphrase rotation in progress (its new passphrase is
		// pending): it goes with the disk it rotates, nothing else.
		if pk, ok := pt.Keys.(pendingChecker); ok && (s.Owner == nil || !strings.EqualFold(s.Owner.InstanceUUID, rel.instanceUUID) || rel.instanceUUID == "") {
			pending, err := pk.HasPending(ctx, id)
			if err != nil {
				return nil, err
			}
			if pending {
				out = append(out, "a pending passphrase rotation (hostctl keys status)")
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out), nil
}

// deleteSecret deletes the key-manager secret id unless something other
// than what rel releases names it: then keys.ErrInUse naming the holders,
// and the secret stays. A secret already gone is keys.ErrNotFound.
func (pt *Part) deleteSecret(ctx context.Context, id string, rel secretRelease) error {
	if pt.Keys == nil {
		return ErrNoKeyManager
	}
	defer pt.LockSecret(id)()
	holders, err := pt.secretHolders(ctx, id, rel)
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", id, err)
	}
	if len(holders) > 0 {
		return fmt.Errorf("delete secret %s: %w: named by %s", id, keys.ErrInUse, strings.Join(holders, ", "))
	}
	if err := pt.Keys.Delete(ctx, id); err != nil {
		return err
	}
	pt.log.Info("secret deleted", "secret", id)
	return nil
}

// deleteSecretQuietly is deleteSecret after a commit: a secret already
// gone is no error, one still named is kept (logged), other failures are
// returned.
func (pt *Part) deleteSecretQuietly(ctx context.Context, id string, rel secretRelease) error {
	err := pt.deleteSecret(ctx, id, rel)
	switch {
	case err == nil, errors.Is(err, keys.ErrNotFound), errors.Is(err, store.ErrNotFound):
		return nil
	case errors.Is(err, keys.ErrInUse):
		pt.log.Info("secret kept: something else names it", "secret", id, "err", err)
		return nil
	}
	return err
}
