package ops

// Instance snapshots with the specification's encryption choices
// (issue: ephemeral storage encryption, item 8).
//
// A snapshot copies a stopped instance's root disk, its backing chain
// flattened, into a new image of the catalog with qemu-img convert (the
// passphrases on pipes). --encryption-key chooses how the image is
// encrypted:
//
//	same     (default) a new key-manager secret holding the root disk's
//	         passphrase; a plain root disk gives a plain image
//	new      a newly generated secret: the image is re-encrypted
//	existing a secret the user brings (--secret-uuid): one of the
//	         instance's project (Snapshot, a member's), or of any project
//	         (SnapshotAnyProject, the administrator's)
//	none     a plain image
//
// An encrypted image gets os_encrypt_format, os_encrypt_cipher (read back
// from its header), os_encrypt_key_id, os_encrypt_key_deletion_policy
// (on_image_deletion for the secrets the snapshot made, do_not_delete for
// a user's), os_decrypt_container_format and os_decrypt_size; deleting
// the image deletes its secret when the policy says so (DeleteImage).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/encryption/policy"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// checkSnapshot validates a request (400s naming field, value and rule).
func checkSnapshot(r *types.SnapshotRequest) error {
	var errs []model.FieldError
	if err := images.CheckName(r.Image); err != nil {
		errs = append(errs, model.FieldError{Field: "name", Value: r.Image, Rule: err.Error()})
	}
	if r.EncryptionKey == "" {
		r.EncryptionKey = types.SnapshotKeySame
	}
	switch r.EncryptionKey {
	case types.SnapshotKeySame, types.SnapshotKeyNew, types.SnapshotKeyNone:
		if r.SecretUUID != "" {
			errs = append(errs, model.FieldError{Field: "secret_uuid", Value: r.SecretUUID, Rule: "is only for encryption_key existing"})
		}
	case types.SnapshotKeyExisting:
		if r.SecretUUID == "" {
			errs = append(errs, model.FieldError{Field: "secret_uuid", Rule: "is required with encryption_key existing"})
		}
	default:
		errs = append(errs, model.FieldError{Field: "encryption_key", Value: r.EncryptionKey, Rule: "must be same, new, existing or none"})
	}
	if len(errs) > 0 {
		return &model.SpecError{Errors: errs, Of: "snapshot request"}
	}
	return nil
}

// Snapshot copies the stopped instance name's root disk into a new image
// of the catalog, encrypted as req says; encryption_key existing names a
// secret of the instance's project. Every step is undone on failure: the
// partial file, the key-manager secret the snapshot made, the image.
func (o *snapshotter) Snapshot(ctx context.Context, name string, req types.SnapshotRequest) (images.Image, error) {
	return o.snapshot(ctx, name, req, false)
}

// SnapshotAnyProject is Snapshot where encryption_key existing may name a
// secret of any project (the administrator's: sharing an encrypted image
// with another project).
func (o *snapshotter) SnapshotAnyProject(ctx context.Context, name string, req types.SnapshotRequest) (images.Image, error) {
	return o.snapshot(ctx, name, req, true)
}

func (o *snapshotter) snapshot(ctx context.Context, name string, req types.SnapshotRequest, anyProject bool) (_ images.Image, err error) {
	defer o.frame.Observe("snapshot", time.Now(), &err)
	if err := checkSnapshot(&req); err != nil {
		return images.Image{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	defer o.frame.LockInstance(name)()
	_, in, err := instance(ctx, o.frame, "", part.Snapshot, name, stopped)
	if err != nil {
		return images.Image{}, err
	}
	if hv, _ := o.frame.Capabilities(); !hv {
		return images.Image{}, fmt.Errorf("snapshot %s: %w: this host runs without a hypervisor (--virt none) and made no disk to copy", name, controller.ErrState)
	}
	r := revert.New(o.log, "snapshot "+name)
	defer r.Fail(&err)
	img, err := o.snapshotRoot(ctx, r, in, req, anyProject)
	if err != nil {
		return images.Image{}, err
	}
	r.Success()
	o.frame.Emit(ctx, controller.StreamImages, "image.imported", types.Image(img))
	return img, nil
}

// snapshotRoot copies the stopped instance in's root disk into a new
// image as req says (checked); the undo steps on r delete what it made.
// Shelve uses it too (shelve.go). anyProject lets encryption_key existing
// name another project's secret.
func (o *snapshotter) snapshotRoot(ctx context.Context, r *revert.Reverter, in *model.Instance, req types.SnapshotRequest, anyProject bool) (_ images.Image, err error) {
	name := in.Name
	root := rootIndex(in)
	if root < 0 {
		return images.Image{}, fmt.Errorf("snapshot %s: %w: the instance has no disk", name, controller.ErrState)
	}
	disk := in.Disks[root]
	bds, err := blockDevices(ctx, o.disks, in.UUID)
	if err != nil {
		return images.Image{}, err
	}
	km, luks := o.secrets.Encryption()
	bd := bds[disk.Name]
	if bd.Encrypted && km == nil {
		return images.Image{}, fmt.Errorf("snapshot %s: %w: its root disk is encrypted and this host has no key manager", name, controller.ErrState)
	}
	src := encryption.Source{Path: diskFile(o.files, in, disk)}
	if bd.Encrypted {
		if src.Pass, err = km.Passphrase(ctx, bd.EncryptionSecretUUID); err != nil {
			return images.Image{}, fmt.Errorf("snapshot %s: disk %s: %w", name, disk.Name, err)
		}
		defer clear(src.Pass)
		if bd.BackingEncryptionSecretUUID != "" {
			if src.BackingPass, err = km.Passphrase(ctx, bd.BackingEncryptionSecretUUID); err != nil {
				return images.Image{}, fmt.Errorf("snapshot %s: disk %s backing file: %w", name, disk.Name, err)
			}
			defer clear(src.BackingPass)
		}
	}

	keyID, deletion, pass, err := o.snapshotKey(ctx, r, in, req, src.Pass, anyProject)
	if err != nil {
		return images.Image{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	defer clear(pass)
	tmp, err := os.MkdirTemp(o.files.DataDir(), ".snapshot-")
	if err != nil {
		return images.Image{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "image.qcow2")
	if err := luks.Convert(ctx, out, src, pass); err != nil {
		return images.Image{}, fmt.Errorf("snapshot %s: disk %s: %w", name, disk.Name, err)
	}
	info, err := luks.Inspect(ctx, out)
	if err != nil {
		return images.Image{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	dir := o.images.ImageDir()
	props := map[string]string{}
	if pass != nil {
		if !info.Encrypted || info.EncryptFormat != encryption.FormatLUKS {
			return images.Image{}, fmt.Errorf("snapshot %s: qemu-img info reads no LUKS header in the copy (encrypted=%t, format %q)", name, info.Encrypted, info.EncryptFormat)
		}
		if err := luks.Verify(ctx, out, pass, nil); err != nil {
			return images.Image{}, fmt.Errorf("snapshot %s: the copy does not open with its secret: %w", name, err)
		}
		size, err := dir.VirtualSize(ctx, out)
		if err != nil {
			return images.Image{}, fmt.Errorf("snapshot %s: %w", name, err)
		}
		props = map[string]string{
			policy.ImageEncryptFormat:         encryption.FormatLUKS,
			policy.ImageEncryptCipher:         info.CipherSpec(),
			policy.ImageEncryptKeyID:          keyID,
			policy.ImageEncryptKeyDeletion:    deletion,
			policy.ImageDecryptContainerFormt: "bare",
			policy.ImageDecryptSize:           strconv.FormatInt(size, 10),
		}
	}
	f, err := os.Open(out)
	if err != nil {
		return images.Image{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	defer f.Close()
	if keyID != "" {
		// The image is about to name the secret: it is not deleted
		// meanwhile (the core's secret rule).
		defer o.secrets.LockSecret(keyID)()
		if _, err := km.Get(ctx, keyID); err != nil {
			return images.Image{}, fmt.Errorf("snapshot %s: secret %s: %w", name, keyID, err)
		}
	}
	img, err := dir.Import(ctx, req.Image, props, f)
	if err != nil {
		return images.Image{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	r.Add("delete image "+img.Name, func(ctx context.Context) error { return dir.Delete(ctx, img.Name, nil) })
	o.log.Info("instance snapshot", "instance", name, "image", img.Name, "encryption_key", req.EncryptionKey, "secret", keyID)
	return img, nil
}

// snapshotKey returns the secret (its id, deletion policy and
// passphrase) the snapshot image is encrypted under, nil for a plain
// image; the undo step deletes a secret it made.
func (o *snapshotter) snapshotKey(ctx context.Context, r *revert.Reverter, in *model.Instance, req types.SnapshotRequest, rootPass []byte, anyProject bool) (string, string, []byte, error) {
	mode := req.EncryptionKey
	if mode == types.SnapshotKeyNone || mode == types.SnapshotKeySame && rootPass == nil {
		return "", "", nil, nil
	}
	km, _ := o.secrets.Encryption()
	if km == nil {
		return "", "", nil, disks.EncryptionConflict("encryption_key", mode, "this host has no key manager: it cannot make encrypted images")
	}
	if mode == types.SnapshotKeyExisting {
		sec, err := km.Get(ctx, req.SecretUUID)
		switch {
		case errors.Is(err, keys.ErrNotFound):
			return "", "", nil, disks.EncryptionConflict("secret_uuid", req.SecretUUID, "no such secret in the key manager")
		case err != nil:
			return "", "", nil, err
		case sec.ProjectID != in.ProjectID && !anyProject:
			return "", "", nil, disks.EncryptionConflict("secret_uuid", req.SecretUUID,
				fmt.Sprintf("the secret belongs to project %q and the instance to project %q: the instance's project may not read it", sec.ProjectID, in.ProjectID))
		}
		pass, err := km.Passphrase(ctx, sec.UUID)
		if err != nil {
			return "", "", nil, err
		}
		return sec.UUID, policy.KeyDeletionDoNotDelete, pass, nil
	}
	if in.ProjectID == "" {
		return "", "", nil, disks.EncryptionConflict("project_id", "", "the instance has no project: an encrypted image's secret is owned by one")
	}
	kr := keys.Request{Name: "image-" + req.Image, ProjectID: in.ProjectID}
	if mode == types.SnapshotKeySame {
		kr.Payload = rootPass
	}
	sec, err := km.Create(ctx, kr)
	if err != nil {
		return "", "", nil, err
	}
	r.Add("delete key-manager secret "+sec.UUID, func(ctx context.Context) error {
		return o.disks.ReleaseSecret(ctx, sec.UUID, req.Image)
	})
	pass, err := km.Passphrase(ctx, sec.UUID)
	if err != nil {
		return "", "", nil, err
	}
	return sec.UUID, policy.KeyDeletionOnImageDeletion, pass, nil
}
