package catalog

import (
	"context"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/keys"
)

func secretOf(s keys.Secret) *types.Secret {
	out := &types.Secret{UUID: s.UUID, Name: s.Name, ProjectID: s.ProjectID, Type: s.Type, Created: s.Created, KeyID: s.KeyID, KeyGeneration: s.Generation}
	if s.Owner != nil {
		out.InstanceUUID, out.InstanceName, out.Disk = s.Owner.InstanceUUID, s.Owner.InstanceName, s.Owner.Disk
	}
	return out
}

// CreateSecret stores a user's secret (the passphrase brought, or one
// generated); only its metadata is returned.
func (c *Catalog) CreateSecret(ctx context.Context, req types.SecretRequest) (*types.Secret, error) {
	if c.keys == nil {
		return nil, ErrNoKeyManager
	}
	s, err := c.keys.Create(ctx, keys.Request{Name: req.Name, ProjectID: req.ProjectID, Payload: req.Payload})
	if err != nil {
		return nil, err
	}
	c.log.Info("secret created", "secret", s.UUID, "project", s.ProjectID)
	return secretOf(s), nil
}

// Secrets lists the secrets of project ("" for all).
func (c *Catalog) Secrets(ctx context.Context, project string) ([]types.Secret, error) {
	if c.keys == nil {
		return nil, ErrNoKeyManager
	}
	ss, err := c.keys.List(ctx, project)
	if err != nil {
		return nil, err
	}
	out := make([]types.Secret, len(ss))
	for i, s := range ss {
		out[i] = *secretOf(s)
	}
	return out, nil
}

// Secret returns one secret's metadata.
func (c *Catalog) Secret(ctx context.Context, uuid string) (*types.Secret, error) {
	if c.keys == nil {
		return nil, ErrNoKeyManager
	}
	s, err := c.keys.Get(ctx, uuid)
	if err != nil {
		return nil, err
	}
	return secretOf(s), nil
}

// DeleteSecret deletes a secret nothing names any more; one an image, a
// disk, a backing file, a rescue or a pending rotation still names is
// refused (keys.ErrInUse, 409) naming them (Secrets.ReleaseSecret).
func (c *Catalog) DeleteSecret(ctx context.Context, uuid string) error {
	if c.keys == nil {
		return ErrNoKeyManager
	}
	return c.secrets.ReleaseSecret(ctx, uuid, "")
}
