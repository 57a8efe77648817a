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
//     the disks part's one rule (Secrets.ReleaseSecret): it goes only
//     when nothing names it, and the refusal (409) names every holder.
//
// The daemon wires the catalog with the registries, the disks part and
// the store's instance records directly; the controller core does not
// know the catalog.
package catalog

import (
	"context"
	"errors"
	"log/slog"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/events"
	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/internal/keylock"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/keys"
)

// Users names the instances that use a flavor (on every host sharing
// the store) or an image (this host's, shelved ones included: the image
// directory is this host's). StoreUsers reads them from the store.
type Users interface {
	FlavorUsers(ctx context.Context, flavor string) ([]string, error)
	ImageUsers(ctx context.Context, image string) ([]string, error)
}

// Secrets is the one rule for deleting a key-manager secret and the
// secrets' locks: the disks part's (hostctl/parts/disks).
type Secrets interface {
	// ReleaseSecret deletes the key-manager secret id: refused
	// (keys.ErrInUse) naming what still names it, image (being deleted;
	// "" for none) apart.
	ReleaseSecret(ctx context.Context, id, image string) error
	// LockSecret holds the lock of secret id (the rule's deletions hold
	// it) until unlock.
	LockSecret(id string) (unlock func())
}

// KeyManager is what the catalog uses of the key manager
// (internal/keys); deletions go through Secrets.ReleaseSecret.
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
	// Flavors is the flavor registry instances are laid out from; nil
	// when the store keeps no records.
	Flavors *flavors.Registry
	// Images is this host's image directory, the one instances' disks
	// are made from (and which counts their uses).
	Images *images.Dir
	// Users names the instances using a flavor or an image.
	Users Users
	// Secrets is the disks part: deletions of secrets go through its
	// rule; nil: secrets are not deleted (ErrNoKeyManager).
	Secrets Secrets
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
	flavors *flavors.Registry
	images  *images.Dir
	users   Users
	secrets Secrets
	keys    KeyManager
	luks    ImageVerifier
	audit   *events.Log
	log     *slog.Logger
}

// New returns the catalog opts wires.
func New(opts Options) *Catalog {
	c := &Catalog{flavors: opts.Flavors, images: opts.Images, users: opts.Users, secrets: opts.Secrets,
		keys: opts.Keys, luks: opts.LUKS, audit: opts.Audit, log: opts.Logger}
	if c.secrets == nil {
		c.secrets = &noSecrets{}
	}
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

// noSecrets deletes no secret: the catalog was given no disks part.
type noSecrets struct{ locks keylock.Map }

func (*noSecrets) ReleaseSecret(context.Context, string, string) error { return ErrNoKeyManager }
func (s *noSecrets) LockSecret(id string) func()                       { return s.locks.Lock(id) }
