package controller

import (
	"context"
	"io"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/catalog"
	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/internal/keys"
)

// The flavor registry, the image catalog and the secrets are served by
// hostctl/catalog over the core (core_catalog.go). The tests here drive
// them through the catalog over the harness's controller, with the
// controller's key manager, LUKS tool and audit log as they are when
// called (the tests replace the key manager after construction).

// catalog returns the catalog over c.
func (c *Controller) catalog() *catalog.Catalog {
	return catalog.New(c, catalog.Options{Keys: c.keys, LUKS: c.luks, Audit: c.audit, Logger: c.log})
}

// Catalog is the catalog over the harness's controller.
func (e *env) Catalog() *catalog.Catalog { return e.c.catalog() }

// WithKeys gives the harness's controller the real key manager (no fault
// wrapper: its pending rotations are seen) and the real LUKS tool, and
// returns the key manager.
func (e *env) WithKeys() *keys.Manager {
	e.t.Helper()
	withEncryption(e.t, e)
	return realKeys(e.t, e)
}

// The catalog's calls on the controller, for the tests of the core that
// set up flavors, images and secrets.

func (c *Controller) CreateFlavor(ctx context.Context, f flavors.Flavor) (flavors.Flavor, error) {
	return c.catalog().CreateFlavor(ctx, f)
}

func (c *Controller) Flavor(ctx context.Context, name string) (flavors.Flavor, error) {
	return c.catalog().Flavor(ctx, name)
}

func (c *Controller) Flavors(ctx context.Context) ([]flavors.Flavor, error) {
	return c.catalog().Flavors(ctx)
}

func (c *Controller) DeleteFlavor(ctx context.Context, name string) error {
	return c.catalog().DeleteFlavor(ctx, name)
}

func (c *Controller) ImportImage(ctx context.Context, name string, props map[string]string, r io.Reader) (images.Image, error) {
	return c.catalog().ImportImage(ctx, name, props, r)
}

func (c *Controller) Image(ctx context.Context, name string) (images.Image, error) {
	return c.catalog().Image(ctx, name)
}

func (c *Controller) Images(ctx context.Context) ([]images.Image, error) {
	return c.catalog().Images(ctx)
}

func (c *Controller) DeleteImage(ctx context.Context, name string) error {
	return c.catalog().DeleteImage(ctx, name)
}

func (c *Controller) CreateSecret(ctx context.Context, req types.SecretRequest) (*types.Secret, error) {
	return c.catalog().CreateSecret(ctx, req)
}

func (c *Controller) Secrets(ctx context.Context, project string) ([]types.Secret, error) {
	return c.catalog().Secrets(ctx, project)
}

func (c *Controller) Secret(ctx context.Context, uuid string) (*types.Secret, error) {
	return c.catalog().Secret(ctx, uuid)
}

func (c *Controller) DeleteSecret(ctx context.Context, uuid string) error {
	return c.catalog().DeleteSecret(ctx, uuid)
}

// realKeys replaces the key manager's fault wrapper by the manager itself
// (a *keys.Manager: pending rotations are seen).
func realKeys(t *testing.T, e *env) *keys.Manager {
	t.Helper()
	fk, ok := e.c.keys.(faultyKeys)
	if !ok {
		t.Fatalf("key manager %T", e.c.keys)
	}
	km, ok := fk.KeyManager.(*keys.Manager)
	if !ok {
		t.Fatalf("key manager %T", fk.KeyManager)
	}
	e.c.keys = km
	return km
}
