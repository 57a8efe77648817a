package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/encryption/policy"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// keyDeletionOnImageDeletion is the os_encrypt_key_deletion_policy under
// which an image's secret goes with the image (hostctl/encryption/policy
// checks the property's values).
const keyDeletionOnImageDeletion = "on_image_deletion"

// ImportImage reads an image into the image directory. An image naming a
// secret (os_encrypt_key_id) is refused unless the key manager has that
// secret and its passphrase opens the image's LUKS header
// (importKeyCheck).
func (c *Catalog) ImportImage(ctx context.Context, name string, props map[string]string, r io.Reader) (images.Image, error) {
	verify, unlock, err := c.importKeyCheck(ctx, name, props)
	if err != nil {
		return images.Image{}, err
	}
	defer unlock()
	img, err := c.images.ImportVerified(ctx, name, props, r, verify)
	if err == nil {
		c.emit(ctx, StreamImages, "image.imported", types.Image(img))
	}
	return img, err
}

// Image returns an image of the image directory.
func (c *Catalog) Image(ctx context.Context, name string) (images.Image, error) {
	return c.images.Get(ctx, name)
}

// Images lists the image directory.
func (c *Catalog) Images(ctx context.Context) ([]images.Image, error) {
	return c.images.List(ctx)
}

// DeleteImage deletes an image no instance of this host uses (the image
// directory is this host's), and its secret as its
// os_encrypt_key_deletion_policy says (deleteImageSecret).
func (c *Catalog) DeleteImage(ctx context.Context, name string) error {
	dir := c.images
	img, _ := dir.Get(ctx, name)
	err := dir.Delete(ctx, name, func(ctx context.Context) ([]string, error) {
		return c.users.ImageUsers(ctx, name)
	})
	if err != nil {
		return err
	}
	kept, err := c.deleteImageSecret(ctx, img)
	ev := map[string]string{"name": name}
	if kept != "" {
		ev["secret_kept"] = kept
	}
	c.emit(ctx, StreamImages, "image.deleted", ev)
	return err
}

// deleteImageSecret deletes the secret of a deleted image when its
// os_encrypt_key_deletion_policy is on_image_deletion and nothing else
// names it (Secrets.ReleaseSecret): a secret another image, a disk or a
// rotation still names stays, and the returned note says why (empty when
// there is nothing to say). A failure is returned as an error (the image
// is gone).
func (c *Catalog) deleteImageSecret(ctx context.Context, img images.Image) (string, error) {
	id := img.Properties[policy.ImageEncryptKeyID]
	if id == "" || c.keys == nil || img.Properties[policy.ImageEncryptKeyDeletion] != keyDeletionOnImageDeletion {
		return "", nil
	}
	err := c.secrets.ReleaseSecret(ctx, id, img.Name)
	switch {
	case err == nil, errors.Is(err, keys.ErrNotFound), errors.Is(err, store.ErrNotFound):
		return "", nil
	case errors.Is(err, keys.ErrInUse):
		c.log.Info("secret of a deleted image kept: something else names it", "image", img.Name, "secret", id, "err", err)
		return err.Error(), nil
	}
	c.log.Warn("secret of a deleted image not deleted", "image", img.Name, "secret", id, "err", err)
	return "", fmt.Errorf("image %s deleted, its secret %s not: %w", img.Name, id, err)
}

// importKeyCheck is the check of an image import naming a secret in
// os_encrypt_key_id (issue 20, item 2): the key manager must have the
// secret (a field error naming the key id otherwise), and the returned
// VerifyFunc proves that its passphrase opens the file's LUKS header. The
// secret's lock is held until unlock, so it is not deleted before the
// image names it. Nothing to check (no key id): a nil VerifyFunc.
func (c *Catalog) importKeyCheck(ctx context.Context, name string, props map[string]string) (_ images.VerifyFunc, _ func(), err error) {
	keyID, ok := props[policy.ImageEncryptKeyID]
	if !ok {
		return nil, func() {}, nil
	}
	field := "properties[" + policy.ImageEncryptKeyID + "]"
	refuse := func(rule string) error {
		return fmt.Errorf("import image %s: %w", name, &model.SpecError{Errors: []model.FieldError{{Field: field, Value: keyID, Rule: rule}}})
	}
	if err := keys.CheckUUID(keyID); err != nil {
		return nil, nil, refuse("not a secret UUID (8-4-4-4-12 lower-case hex digits)")
	}
	if c.keys == nil {
		return nil, nil, fmt.Errorf("import image %s: %w", name, &conflict{fe: model.FieldError{Field: field, Value: keyID,
			Rule: "this host has no key manager: it cannot check that the secret opens the image"}})
	}
	release := c.secrets.LockSecret(keyID)
	defer func() {
		if err != nil {
			release()
		}
	}()
	if _, err := c.keys.Get(ctx, keyID); errors.Is(err, keys.ErrNotFound) {
		return nil, nil, refuse("names no secret in the key manager (hostctl secret list shows them; hostctl secret create makes one)")
	} else if err != nil {
		return nil, nil, fmt.Errorf("import image %s: secret %s: %w", name, keyID, err)
	}
	verify := func(ctx context.Context, path, format string) error {
		pass, err := c.keys.Passphrase(ctx, keyID)
		if err != nil {
			return fmt.Errorf("secret %s: %w", keyID, err)
		}
		defer clear(pass)
		err = c.luks.VerifyImage(ctx, path, format, pass)
		if errors.Is(err, encryption.ErrWrongPassphrase) {
			return &model.SpecError{Errors: []model.FieldError{{Field: field, Value: keyID,
				Rule: "the secret's passphrase does not open the image's LUKS header: the image is encrypted under another key"}}}
		}
		if err != nil {
			return fmt.Errorf("open the image with secret %s: %w", keyID, err)
		}
		return nil
	}
	return verify, release, nil
}

// conflict is a request this host cannot honour (409), not an invalid
// one: its field error is handed out as a spec error's (the API lists
// it) without making the error an invalid spec.
type conflict struct{ fe model.FieldError }

func (e *conflict) Error() string {
	return fmt.Sprintf("%v: encryption request cannot be honoured: %v", store.ErrConflict, e.fe)
}

func (e *conflict) Unwrap() error { return store.ErrConflict }

// As hands out the field error as a *model.SpecError.
func (e *conflict) As(target any) bool {
	if p, ok := target.(**model.SpecError); ok {
		*p = &model.SpecError{Errors: []model.FieldError{e.fe}}
		return true
	}
	return false
}
