// Package catalog is the admin API's flavor registry, image catalog and
// secrets (api.Services.Flavors, Images and Secrets): the registries
// with their audit events and their in-use rules.
//
//   - A flavor is deleted only when no instance, on any host sharing the
//     store, names it; an image only when no instance of this host
//     (shelved ones included) does (the image directory is this host's).
//   - An image naming a secret (os_encrypt_key_id) is imported only when
//     the key manager has the secret and its passphrase opens the image's
//     LUKS header; the secret's lock is held meanwhile, so it is not
//     deleted before the image names it.
//   - A secret is deleted — by `secret delete`, or with an image whose
//     os_encrypt_key_deletion_policy is on_image_deletion — only through
//     the core's one rule (Core.ReleaseSecret): it goes only when nothing
//     names it, and the refusal (409) names every holder.
//
// The catalog reaches the controller core through Core, the few things
// it needs of it; the core does not know the catalog.
package catalog

import (
	"context"
	"errors"
	"log/slog"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/events"
	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/keys"
)

// Core is what the catalog needs of the controller core
// (hostctl/controller, core_catalog.go).
type Core interface {
	// FlavorRegistry is the flavor registry instances are laid out from;
	// nil when the store keeps no records.
	FlavorRegistry() *flavors.Registry
	// ImageDir is this host's image directory, the one instances' disks
	// are made from (and which counts their uses).
	ImageDir() *images.Dir
	// FlavorUsers names the instances of every host that name flavor;
	// ImageUsers the instances of this host, shelved ones included, that
	// name image.
	FlavorUsers(ctx context.Context, flavor string) ([]string, error)
	ImageUsers(ctx context.Context, image string) ([]string, error)
	// ReleaseSecret deletes the key-manager secret id under the one rule
	// for deleting secrets: refused (keys.ErrInUse) naming what still
	// names it, image (being deleted; "" for none) apart.
	ReleaseSecret(ctx context.Context, id, image string) error
	// LockSecret holds the lock of secret id (the rule's deletions hold
	// it) until unlock.
	LockSecret(id string) (unlock func())
}

// KeyManager is what the catalog uses of the key manager
// (internal/keys); deletions go through Core.ReleaseSecret.
type KeyManager interface {
	Create(ctx context.Context, req keys.Request) (keys.Secret, error)
	Get(ctx context.Context, id string) (keys.Secret, error)
	Passphrase(ctx context.Context, id string) ([]byte, error)
	List(ctx context.Context, project string) ([]keys.Secret, error)
}

// ImageVerifier proves that a passphrase opens an image's LUKS header
// (hostctl/encryption).
type ImageVerifier interface {
	VerifyImage(ctx context.Context, path, format string, pass []byte) error
}

// Options configure a Catalog.
type Options struct {
	// Keys is the key manager of the secrets; nil: secrets are not
	// served (ErrNoKeyManager) and an image naming one is refused.
	Keys KeyManager
	// LUKS opens the LUKS header of an image naming a secret;
	// hostctl/encryption with qemu-img from PATH when nil.
	LUKS ImageVerifier
	// Audit is where flavor and image changes are emitted; none when nil.
	Audit  *events.Log
	Logger *slog.Logger
}

// Catalog serves the flavors, the images and the secrets.
type Catalog struct {
	core  Core
	keys  KeyManager
	luks  ImageVerifier
	audit *events.Log
	log   *slog.Logger
}

// New returns the catalog over core.
func New(core Core, opts Options) *Catalog {
	c := &Catalog{core: core, keys: opts.Keys, luks: opts.LUKS, audit: opts.Audit, log: opts.Logger}
	if c.luks == nil {
		c.luks = encryption.New(encryption.Options{})
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c
}

// Audit streams of the catalog (hostctl events list flavors|images).
const (
	StreamFlavors = "flavors"
	StreamImages  = "images"
)

// ErrNoKeyManager: the catalog has no key manager.
var ErrNoKeyManager = errkind.New(errkind.Unsupported, "this hostctl has no key manager")

var errNoRecords = errors.New("the store of this controller keeps no records (flavors)")

// emit writes an audit event after a change committed; a failure to
// append it is logged (by the audit log) and does not undo the change.
func (c *Catalog) emit(ctx context.Context, stream, typ string, payload any) {
	if c.audit != nil {
		_, _ = c.audit.Emit(ctx, stream, typ, payload)
	}
}
