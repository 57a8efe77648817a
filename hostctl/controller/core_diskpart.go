package controller

import (
	"context"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// What the disks part (hostctl/parts/disks, its Core interface) asks of
// the core: the handles the core holds (key manager, LUKS layer, libvirt
// secrets, records, disk images, catalog), the host's encryption
// settings, the instances' records, locks and state records; and the
// part itself, for hostctl/ops (DiskPart).

// Encryption is the core's key manager (nil without one) and LUKS disk
// layer.
func (c *Controller) Encryption() (KeyManager, LUKS) { return c.keys, c.luks }

// LibvirtSecrets is libvirt's secrets (nil without a hypervisor).
func (c *Controller) LibvirtSecrets() LibvirtSecrets { return c.libvirtSecrets }

// Records is the record store (nil when the store keeps none).
func (c *Controller) Records() store.Records { return c.records }

// DiskImages is the core's disk-image layer (blank and overlay disks).
func (c *Controller) DiskImages() Images { return c.images }

// Image is the catalog image name (nil for "").
func (c *Controller) Image(ctx context.Context, name string) (*images.Image, error) {
	return c.imageOf(ctx, name)
}

// BlankTemplate is the blank template a flavor's ephemeral or swap disk
// d is an overlay of, made if the cache has none.
func (c *Controller) BlankTemplate(ctx context.Context, d model.Disk) (images.Base, error) {
	return c.blankTemplate(ctx, d)
}

// EncryptionPolicy is the format of a disk requested encrypted without
// one (hostctl serve --ephemeral-encryption-default-format; "": the
// part's default) and the probe of this host's formats (nil: none).
func (c *Controller) EncryptionPolicy() (string, func(context.Context) (encryption.Support, error)) {
	return c.encHost.DefaultFormat, c.encSupport
}

// Instance is the store's record of instance name.
func (c *Controller) Instance(ctx context.Context, name string) (store.Instance, error) {
	return c.store.Instance(ctx, name)
}

// UnlessRunning runs fn under the lock of the instance with UUID uuid
// unless its domain runs (or is paused, shutting down: QEMU may reopen
// its disks); fn runs unlocked when no instance has the UUID.
func (c *Controller) UnlessRunning(ctx context.Context, uuid string, fn func(context.Context) error) error {
	name := c.nameOf(ctx, uuid)
	if name != uuid {
		defer c.locks.Lock(name)()
		if rec, err := c.store.Instance(ctx, name); err == nil && rec.UUID == uuid {
			st, err := c.domains.State(ctx, name)
			if err == nil && st != virt.StateShutoff {
				return nil
			}
			if err != nil && !isNotFound(err) {
				return err
			}
		}
	}
	return fn(ctx)
}

// DiskState is an instance's shelve or rescue state as the disks part's
// secret rule reads it (an alias of an unnamed struct type, declared
// identically as disks.State).
type DiskState = struct {
	Instance, State, ShelvedImage, RescueImage, RescueSecret string
}

// States returns the state records of shelved and rescued instances, by
// instance UUID (the states part keeps them: core_vmstate.go).
func (c *Controller) States(ctx context.Context) (map[string]DiskState, error) {
	return c.states().Summaries(ctx)
}

// DiskPart is the disks part the core was given (Options.Disks;
// noDisks without one): hostctl/ops makes, resizes and forgets disks and
// their secrets through it.
func (c *Controller) DiskPart() Disks { return c.disks }
