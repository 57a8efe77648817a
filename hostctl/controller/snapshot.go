package controller

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
	"github.com/vmeta/vmeta/hostctl/part"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/encryption/policy"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// The --encryption-key choices of a snapshot.
const (
	SnapshotKeySame     = "same"
	SnapshotKeyNew      = "new"
	SnapshotKeyExisting = "existing"
	SnapshotKeyNone     = "none"
)

// Key deletion policies of an encrypted image (os_encrypt_key_deletion_policy).
const (
	KeyDeletionOnImageDeletion = "on_image_deletion"
	KeyDeletionDoNotDelete     = "do_not_delete"
)

// SnapshotRequest is an instance snapshot's parameters (EncryptionKey
// same when empty).
type SnapshotRequest = types.SnapshotRequest

// checkSnapshot validates a request (400s naming field, value and rule).
func checkSnapshot(r *SnapshotRequest) error {
	var errs []model.FieldError
	if err := images.CheckName(r.Image); err != nil {
		errs = append(errs, model.FieldError{Field: "name", Value: r.Image, Rule: err.Error()})
	}
	if r.EncryptionKey == "" {
		r.EncryptionKey = SnapshotKeySame
	}
	switch r.EncryptionKey {
	case SnapshotKeySame, SnapshotKeyNew, SnapshotKeyNone:
		if r.SecretUUID != "" {
			errs = append(errs, model.FieldError{Field: "secret_uuid", Value: r.SecretUUID, Rule: "is only for encryption_key existing"})
		}
	case SnapshotKeyExisting:
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
func (c *Controller) Snapshot(ctx context.Context, name string, req SnapshotRequest) (images.Image, error) {
	return c.snapshot(ctx, name, req, false)
}

// SnapshotAnyProject is Snapshot where encryption_key existing may name a
// secret of any project (the administrator's: sharing an encrypted image
// with another project).
func (c *Controller) SnapshotAnyProject(ctx context.Context, name string, req SnapshotRequest) (images.Image, error) {
	return c.snapshot(ctx, name, req, true)
}

func (c *Controller) snapshot(ctx context.Context, name string, req SnapshotRequest, anyProject bool) (_ images.Image, err error) {
	defer c.observe("snapshot", time.Now(), &err)
	if err := checkSnapshot(&req); err != nil {
		return images.Image{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	defer c.locks.Lock(name)()
	_, in, err := c.stoppedInstance(ctx, "snapshot", name)
	if err != nil {
		return images.Image{}, err
	}
	if err := c.checkParts(ctx, part.Snapshot, in); err != nil { // parts.go
		return images.Image{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	if c.domains == nil {
		return images.Image{}, fmt.Errorf("snapshot %s: %w: this host runs without a hypervisor (--virt none) and made no disk to copy", name, ErrState)
	}
	r := revert.New(c.log, "snapshot "+name)
	defer r.Fail(&err)
	img, err := c.snapshotRoot(ctx, r, in, req, anyProject)
	if err != nil {
		return images.Image{}, err
	}
	r.Success()
	c.emit(ctx, StreamImages, "image.imported", types.Image(img))
	return img, nil
}

// snapshotRoot copies the stopped instance in's root disk into a new
// image as req says (checked); the undo steps on r delete what it made.
// Shelve uses it too (shelve.go). anyProject lets encryption_key existing
// name another project's secret.
func (c *Controller) snapshotRoot(ctx context.Context, r *revert.Reverter, in *model.Instance, req SnapshotRequest, anyProject bool) (_ images.Image, err error) {
	name := in.Name
	root := rootDisk(in)
	if root < 0 && len(in.Disks) > 0 {
		root = 0
	}
	if root < 0 {
		return images.Image{}, fmt.Errorf("snapshot %s: %w: the instance has no disk", name, ErrState)
	}
	disk := in.Disks[root]
	rec, _, err := c.loadBlockDevices(ctx, in.UUID)
	if err != nil {
		return images.Image{}, err
	}
	bd := rec.Disks[disk.Name]
	if bd.Encrypted && c.keys == nil {
		return images.Image{}, fmt.Errorf("snapshot %s: %w: its root disk is encrypted and this host has no key manager", name, ErrState)
	}
	src := encryption.Source{Path: filepath.Join(c.dataDir, "instances", in.Name, diskFileOf(disk))}
	if bd.Encrypted {
		if src.Pass, err = c.keys.Passphrase(ctx, bd.EncryptionSecretUUID); err != nil {
			return images.Image{}, fmt.Errorf("snapshot %s: disk %s: %w", name, disk.Name, err)
		}
		defer clear(src.Pass)
		if bd.BackingEncryptionSecretUUID != "" {
			if src.BackingPass, err = c.keys.Passphrase(ctx, bd.BackingEncryptionSecretUUID); err != nil {
				return images.Image{}, fmt.Errorf("snapshot %s: disk %s backing file: %w", name, disk.Name, err)
			}
			defer clear(src.BackingPass)
		}
	}

	keyID, deletion, pass, err := c.snapshotKey(ctx, r, in, req, src.Pass, anyProject)
	if err != nil {
		return images.Image{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	defer clear(pass)
	tmp, err := os.MkdirTemp(c.dataDir, ".snapshot-")
	if err != nil {
		return images.Image{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "image.qcow2")
	if err := c.luks.Convert(ctx, out, src, pass); err != nil {
		return images.Image{}, fmt.Errorf("snapshot %s: disk %s: %w", name, disk.Name, err)
	}
	info, err := c.luks.Inspect(ctx, out)
	if err != nil {
		return images.Image{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	props := map[string]string{}
	if pass != nil {
		if !info.Encrypted || info.EncryptFormat != encryption.FormatLUKS {
			return images.Image{}, fmt.Errorf("snapshot %s: qemu-img info reads no LUKS header in the copy (encrypted=%t, format %q)", name, info.Encrypted, info.EncryptFormat)
		}
		if err := c.luks.Verify(ctx, out, pass, nil); err != nil {
			return images.Image{}, fmt.Errorf("snapshot %s: the copy does not open with its secret: %w", name, err)
		}
		size, err := c.imageDir.VirtualSize(ctx, out)
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
		// meanwhile (secretuse.go).
		defer c.secretLocks.Lock(keyID)()
		if _, err := c.keys.Get(ctx, keyID); err != nil {
			return images.Image{}, fmt.Errorf("snapshot %s: secret %s: %w", name, keyID, err)
		}
	}
	img, err := c.imageDir.Import(ctx, req.Image, props, f)
	if err != nil {
		return images.Image{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	r.Add("delete image "+img.Name, func(ctx context.Context) error { return c.imageDir.Delete(ctx, img.Name, nil) })
	c.log.Info("instance snapshot", "instance", name, "image", img.Name, "encryption_key", req.EncryptionKey, "secret", keyID)
	return img, nil
}

// snapshotKey returns the secret (its id, deletion policy and
// passphrase) the snapshot image is encrypted under, nil for a plain
// image; the undo step deletes a secret it made.
func (c *Controller) snapshotKey(ctx context.Context, r *revert.Reverter, in *model.Instance, req SnapshotRequest, rootPass []byte, anyProject bool) (string, string, []byte, error) {
	mode := req.EncryptionKey
	if mode == SnapshotKeyNone || mode == SnapshotKeySame && rootPass == nil {
		return "", "", nil, nil
	}
	if c.keys == nil {
		return "", "", nil, &encryptionConflict{se: &model.SpecError{Errors: []model.FieldError{{Field: "encryption_key", Value: mode,
			Rule: "this host has no key manager: it cannot make encrypted images"}}}}
	}
	if mode == SnapshotKeyExisting {
		sec, err := c.keys.Get(ctx, req.SecretUUID)
		switch {
		case errors.Is(err, keys.ErrNotFound):
			return "", "", nil, &encryptionConflict{se: &model.SpecError{Errors: []model.FieldError{{Field: "secret_uuid", Value: req.SecretUUID,
				Rule: "no such secret in the key manager"}}}}
		case err != nil:
			return "", "", nil, err
		case sec.ProjectID != in.ProjectID && !anyProject:
			return "", "", nil, &encryptionConflict{se: &model.SpecError{Errors: []model.FieldError{{Field: "secret_uuid", Value: req.SecretUUID,
				Rule: fmt.Sprintf("the secret belongs to project %q and the instance to project %q: the instance's project may not read it", sec.ProjectID, in.ProjectID)}}}}
		}
		pass, err := c.keys.Passphrase(ctx, sec.UUID)
		if err != nil {
			return "", "", nil, err
		}
		return sec.UUID, KeyDeletionDoNotDelete, pass, nil
	}
	if in.ProjectID == "" {
		return "", "", nil, &encryptionConflict{se: &model.SpecError{Errors: []model.FieldError{{Field: "project_id", Value: "",
			Rule: "the instance has no project: an encrypted image's secret is owned by one"}}}}
	}
	kr := keys.Request{Name: "image-" + req.Image, ProjectID: in.ProjectID}
	if mode == SnapshotKeySame {
		kr.Payload = rootPass
	}
	sec, err := c.keys.Create(ctx, kr)
	if err != nil {
		return "", "", nil, err
	}
	r.Add("delete key-manager secret "+sec.UUID, func(ctx context.Context) error {
		return c.deleteSecret(ctx, sec.UUID, secretRelease{image: req.Image})
	})
	pass, err := c.keys.Passphrase(ctx, sec.UUID)
	if err != nil {
		return "", "", nil, err
	}
	return sec.UUID, KeyDeletionOnImageDeletion, pass, nil
}
