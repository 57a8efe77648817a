package disks

// Disks over encrypted images (issue: ephemeral storage encryption, the
// specification's "backing_encryption_secret_uuid").
//
// An image whose os_encrypt_key_id is set is a LUKS qcow2 encrypted under
// that key-manager secret. An instance's root disk over it is an
// encrypted qcow2 overlay with its own secret, and the instance gets its
// own copy of the image's passphrase for the backing file (a new
// key-manager secret owned by the instance's disk, recorded as
// backing_encryption_secret_uuid), so deleting the image's secret later
// (os_encrypt_key_deletion_policy) never makes a running instance's disk
// unreadable, and deleting the instance deletes only its copy. The
// domain names the backing file in an explicit <backingStore> with its
// own <encryption> and libvirt secret (UUID = the copy's), defined before
// start and undefined when the domain stops, like the disk's own.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/encryption/policy"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// encryptedImage returns the catalog image of plan p when it is an
// encrypted one (nil otherwise).
func (pt *Part) encryptedImage(ctx context.Context, p diskPlan) (*images.Image, error) {
	if p.image == "" || p.Base == nil {
		return nil, nil
	}
	img, err := pt.image(ctx, p.image)
	if err != nil || img == nil || !img.Encrypted {
		return nil, err
	}
	return img, nil
}

// checkEncryptedImages returns the conflicts of the disks planned over an
// encrypted image: the disk must be requested encrypted (no surprise
// decryption), this host needs a key manager, and the image's secret must
// exist and belong to the instance's project.
func (pt *Part) checkEncryptedImages(ctx context.Context, in *model.Instance, plans []diskPlan) ([]model.FieldError, error) {
	var errs []model.FieldError
	for _, p := range plans {
		img, err := pt.encryptedImage(ctx, p)
		if err != nil {
			return nil, err
		}
		if img == nil {
			continue
		}
		keyID := img.Properties[policy.ImageEncryptKeyID]
		field := "disks[" + p.target + "]"
		for i, d := range in.Disks {
			if d.Name == p.target {
				field = fmt.Sprintf("disks[%d]", i)
			}
		}
		switch {
		case !p.encrypt:
			errs = append(errs, model.FieldError{Field: field + ".encrypted", Value: false,
				Rule: fmt.Sprintf("image %q is encrypted (%s=%s): a disk over it is encrypted too (no surprise decryption)", img.Name, policy.ImageEncryptKeyID, keyID)})
			continue
		case pt.Keys == nil || pt.Records == nil:
			continue // the disk's own request is refused below
		case keyID == "":
			errs = append(errs, model.FieldError{Field: "image", Value: img.Name,
				Rule: "qemu-img finds the image encrypted but it names no secret in " + policy.ImageEncryptKeyID})
			continue
		}
		sec, err := pt.Keys.Get(ctx, keyID)
		switch {
		case errors.Is(err, keys.ErrNotFound):
			errs = append(errs, model.FieldError{Field: "image", Value: img.Name,
				Rule: fmt.Sprintf("its secret %s=%s is not in the key manager", policy.ImageEncryptKeyID, keyID)})
		case err != nil:
			return nil, fmt.Errorf("secret of image %s: %w", img.Name, err)
		case sec.ProjectID != in.ProjectID:
			errs = append(errs, model.FieldError{Field: "image", Value: img.Name,
				Rule: fmt.Sprintf("its secret %s belongs to project %q and the instance to project %q: the instance's project may not read it", keyID, sec.ProjectID, in.ProjectID)})
		}
	}
	return errs, nil
}

// backingCopy is the instance's copy of an encrypted image's secret.
type backingCopy struct {
	uuid string
	pass []byte
}

// copyImageSecret makes, for a disk planned over an encrypted image, the
// instance's own key-manager secret holding the image's passphrase; the
// undo step deletes it. Nothing (a zero backingCopy) for any other disk.
func (pt *Part) copyImageSecret(ctx context.Context, r *revert.Reverter, in *model.Instance, p diskPlan) (backingCopy, error) {
	img, err := pt.encryptedImage(ctx, p)
	if err != nil || img == nil {
		return backingCopy{}, err
	}
	keyID := img.Properties[policy.ImageEncryptKeyID]
	pass, err := pt.Keys.Passphrase(ctx, keyID)
	if err != nil {
		return backingCopy{}, fmt.Errorf("disk %s: secret %s of image %s: %w", p.target, keyID, img.Name, err)
	}
	sec, err := pt.Keys.Create(ctx, keys.Request{Name: "backing-" + p.target, ProjectID: in.ProjectID, Payload: pass,
		Owner: &keys.Owner{Host: pt.Host, InstanceUUID: in.UUID, InstanceName: in.Name, Disk: p.target}})
	if err != nil {
		clear(pass)
		return backingCopy{}, fmt.Errorf("copy the secret of image %s for disk %s: %w", img.Name, p.target, err)
	}
	r.Add("delete key-manager secret "+sec.UUID, func(ctx context.Context) error {
		return pt.deleteSecret(ctx, sec.UUID, secretRelease{instanceUUID: in.UUID, disks: []string{p.target}})
	})
	return backingCopy{uuid: sec.UUID, pass: pass}, nil
}

// backingSource is the encrypted backing file of the disk image at path
// (data-directory relative, as virt.Host has it), read from the image's
// own header, with the libvirt secret of bd's backing copy.
func (pt *Part) backingSource(ctx context.Context, path string, bd encryption.BlockDevice) (*virt.BackingSource, error) {
	abs, err := virt.ResolveInDataDir(pt.DataDir, path)
	if err != nil {
		return nil, err
	}
	info, err := pt.LUKS.Inspect(ctx, abs)
	if err != nil {
		return nil, err
	}
	if info.BackingFile == "" {
		return nil, fmt.Errorf("%s has no backing file, yet its record names a backing secret %s", abs, bd.BackingEncryptionSecretUUID)
	}
	bf := info.BackingFile
	if !filepath.IsAbs(bf) {
		bf = filepath.Join(filepath.Dir(abs), bf)
	}
	return &virt.BackingSource{Path: bf, Format: info.BackingFormat, SecretUUID: bd.BackingEncryptionSecretUUID}, nil
}

// defineBackingSecret puts the passphrase of disk's encrypted backing
// file into libvirt (none: nothing to do); the undo step undefines it.
func (pt *Part) defineBackingSecret(ctx context.Context, r *revert.Reverter, in *model.Instance, disk string, bd encryption.BlockDevice) error {
	id := bd.BackingEncryptionSecretUUID
	if id == "" {
		return nil
	}
	pass, err := pt.Keys.Passphrase(ctx, id)
	if err != nil {
		return fmt.Errorf("disk %s backing file: %w", disk, err)
	}
	err = pt.Secrets.DefineSecret(ctx, virt.LibvirtSecret{UUID: id, Usage: pt.SecretUsage(in.UUID, disk+"/backing")}, pass)
	clear(pass)
	if err != nil {
		return fmt.Errorf("disk %s backing file: %w", disk, err)
	}
	r.Add("undefine libvirt secret "+id, func(ctx context.Context) error { return pt.Secrets.UndefineSecret(ctx, id) })
	return nil
}
