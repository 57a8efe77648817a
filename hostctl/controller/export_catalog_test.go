package controller

import (
	"testing"

	"github.com/vmeta/vmeta/hostctl/catalog"
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
