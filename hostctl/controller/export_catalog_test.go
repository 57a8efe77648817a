package controller

import (
	"context"
	"testing"

	"github.com/vmeta/vmeta/hostctl/catalog"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/internal/keys"
)

// The flavor registry, the image catalog and the secrets are served by
// hostctl/catalog, wired as the daemon wires it (hostctl/daemon:
// catalog). The tests here drive them through the catalog over the
// harness's records, image directory and disks part, with the disks
// part's key manager and LUKS tool and the audit log as they are when
// called (the tests replace the key manager after construction).

// catalog returns the catalog over c's records and disks part.
func (c *Controller) catalog() *catalog.Catalog {
	dp := c.disks.(*disks.Part)
	users := catalog.StoreUsers{Instances: c.store, Host: c.hostName}
	for _, p := range c.parts {
		if s, ok := p.(interface {
			ImageUsers(ctx context.Context, name string) ([]string, error)
		}); ok {
			users.States = s
		}
	}
	return catalog.New(catalog.Options{Flavors: c.flavors, Images: c.imageDir, Users: users, Secrets: dp,
		Keys: dp.Keys, LUKS: dp.LUKS, Audit: c.audit, Logger: c.log})
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

// realKeys replaces the key manager's fault wrapper by the manager itself
// (a *keys.Manager: pending rotations are seen).
func realKeys(t *testing.T, e *env) *keys.Manager {
	t.Helper()
	fk, ok := e.dp().Keys.(faultyKeys)
	if !ok {
		t.Fatalf("key manager %T", e.dp().Keys)
	}
	km, ok := fk.KeyManager.(*keys.Manager)
	if !ok {
		t.Fatalf("key manager %T", fk.KeyManager)
	}
	e.dp().Keys = km
	return km
}
