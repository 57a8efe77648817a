package controller

import (
	"context"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
)

// The disks part (hostctl/parts/disks) as the harness registers it — as
// the daemon does (hostctl/daemon: Options.Disks) — and what this
// package's tests ask of it.

// diskPart makes the disks part over c (Options.Disks).
func diskPart(c *Controller) Disks { return disks.New(c) }

// withDisks gives e's controller the disks part.
func withDisks(e *env) { e.c.disks = diskPart(e.c) }

// loadBlockDevices returns the block-device records of instance uuid
// (the version is not known here: 0).
func (c *Controller) loadBlockDevices(ctx context.Context, uuid string) (encryption.BlockDevices, int64, error) {
	rec, err := c.disks.BlockDevices(ctx, uuid)
	return rec, 0, err
}

// secretUsage is the libvirt usage of a disk's secret; secretPrefix
// that of every secret of the key manager.
func (c *Controller) secretUsage(instUUID, disk string) string {
	return c.disks.SecretUsage(instUUID, disk)
}

func (c *Controller) secretPrefix() string { return "vmeta/" + c.keys.KeyID() + "/" }

// sweepSecrets is the reconciler's clean-up of the disks' secrets.
func (c *Controller) sweepSecrets(ctx context.Context) error { return c.disks.Sweep(ctx) }

// ErrEncryption is the disks part's.
var ErrEncryption = disks.ErrEncryption
