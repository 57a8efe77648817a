package controller

import (
	"context"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/layout"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/internal/model"
)

// The disks part (hostctl/parts/disks) as the harness registers it — as
// the daemon does (hostctl/daemon: diskPart) — and what this package's
// tests ask of it.

// The disks part's handles, under the names this package's tests use.
type (
	KeyManager = disks.KeyManager
	LUKS       = disks.LUKS
	Images     = disks.Images
)

// The file of a disk (layout.DiskFile), of a disk without a kind.
var diskFileOf = layout.DiskFile

func diskFile(target string) string { return layout.DiskFile(model.Disk{Name: target}) }

// diskPart makes the disks part over c's store, image directory, data
// directory and hypervisor's secrets, without a key manager
// (withEncryption gives it one), bound to c and to c's states part; its
// LUKS tool runs qemuImg.
func diskPart(c *Controller, qemuImg string) *disks.Part {
	var secrets disks.LibvirtSecrets
	if s, ok := c.domains.(disks.LibvirtSecrets); ok {
		secrets = s
	}
	dp := disks.New(disks.Options{LUKS: encryption.New(encryption.Options{QemuImg: qemuImg}), Secrets: secrets,
		Records: c.records, Instances: c.store, Catalog: c.imageDir, DefaultFormat: c.encHost.DefaultFormat,
		DataDir: c.dataDir, Host: c.hostName, Logger: c.log})
	var states disks.Holders
	for _, p := range c.parts {
		if h, ok := p.(disks.Holders); ok {
			states = h
		}
	}
	dp.Bind(c, states)
	return dp
}

// withDiskPart registers the disks part with c (diskPart), first, as the
// daemon does.
func withDiskPart(c *Controller, qemuImg string) *disks.Part {
	dp := diskPart(c, qemuImg)
	c.parts = append([]part.Part{dp}, c.parts...)
	c.disks = dp
	return dp
}

// withDisks gives e's controller the disks part.
func withDisks(e *env) { withDiskPart(e.c, e.qemuImg) }

// dp is the disks part of e's controller: its handles (Keys, LUKS,
// Secrets, Records, Images, Templates, Support) are what a test replaces.
func (e *env) dp() *disks.Part { return e.c.disks.(*disks.Part) }

// loadBlockDevices returns the block-device records of instance uuid
// (the version is not known here: 0).
func (c *Controller) loadBlockDevices(ctx context.Context, uuid string) (encryption.BlockDevices, int64, error) {
	rec, err := c.disks.(*disks.Part).BlockDevices(ctx, uuid)
	return rec, 0, err
}

// secretUsage is the libvirt usage of a disk's secret; secretPrefix
// that of every secret of the key manager.
func (c *Controller) secretUsage(instUUID, disk string) string {
	return c.disks.(*disks.Part).SecretUsage(instUUID, disk)
}

func (c *Controller) secretPrefix() string {
	return "vmeta/" + c.disks.(*disks.Part).Keys.KeyID() + "/"
}

// sweepSecrets is the reconciler's clean-up of the disks' secrets.
func (c *Controller) sweepSecrets(ctx context.Context) error { return c.disks.(*disks.Part).Sweep(ctx) }

// ErrEncryption is the disks part's.
var ErrEncryption = disks.ErrEncryption
