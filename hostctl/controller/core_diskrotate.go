package controller

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// What the disk passphrase rotator (hostctl/diskrotate, its Core
// interface) needs of the core: this host's instances with their
// block-device records, the per-instance lock, whether a domain runs, and
// the libvirt secrets of its disks.

// LockInstance takes the per-instance lock every operation on the named
// instance holds, and returns its release.
func (c *Controller) LockInstance(name string) (unlock func()) { return c.locks.Lock(name) }

// InstanceBlockDevices returns this host's instance named name (an error
// wrapping store.ErrNotFound when there is none, ErrOtherHost when it is
// another host's) and its block-device records.
func (c *Controller) InstanceBlockDevices(ctx context.Context, name string) (*model.Instance, encryption.BlockDevices, error) {
	rec, err := c.ownRecord(ctx, "instance", name)
	if err != nil {
		return nil, encryption.BlockDevices{}, err
	}
	in, err := decodeSpec(rec)
	if err != nil {
		return nil, encryption.BlockDevices{}, err
	}
	bds, err := c.disks.BlockDevices(ctx, in.UUID)
	if err != nil {
		return nil, encryption.BlockDevices{}, err
	}
	return in, bds, nil
}

// HostBlockDevices returns the block-device records of this host's
// instances, by instance UUID. A record that cannot be decoded is left
// out and named in the error.
func (c *Controller) HostBlockDevices(ctx context.Context) (map[string]encryption.BlockDevices, error) {
	if c.records == nil {
		return nil, nil
	}
	recs, err := c.records.Records(ctx, blockDevPrefix)
	if err != nil {
		return nil, fmt.Errorf("block devices: %w", err)
	}
	out := map[string]encryption.BlockDevices{}
	var errs []error
	for _, sr := range recs {
		rec, err := encryption.DecodeBlockDevices(sr.Value)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", sr.Key, err))
			continue
		}
		if rec.Host == c.hostName {
			out[strings.TrimPrefix(sr.Key, blockDevPrefix)] = rec
		}
	}
	return out, errors.Join(errs...)
}

// SetBlockDevice rewrites the block-device record of one disk of in
// (bd.Disk).
func (c *Controller) SetBlockDevice(ctx context.Context, in *model.Instance, bd encryption.BlockDevice) error {
	if c.records == nil {
		return fmt.Errorf("block devices of %s: no record store", in.Name)
	}
	return c.disks.UpdateBlockDevices(ctx, nil, in, map[string]*encryption.BlockDevice{bd.Disk: &bd})
}

// DiskPath returns the image file of in's disk named disk.
func (c *Controller) DiskPath(in *model.Instance, disk string) (string, error) {
	for _, d := range in.Disks {
		if d.Name == disk {
			return virt.ResolveInDataDir(c.dataDir, filepath.Join("instances", in.Name, diskFileOf(d)))
		}
	}
	return "", fmt.Errorf("disk %s of %s: %w: not in the spec", disk, in.Name, store.ErrNotFound)
}

// InstanceState returns in's VM state (the states part's: shelved,
// rescue; "" for none) and whether its domain (with in's UUID) runs.
func (c *Controller) InstanceState(ctx context.Context, in *model.Instance) (vmState string, running bool, err error) {
	st, err := c.states().State(ctx, in.UUID) // core_vmstate.go
	if err != nil {
		return "", false, err
	}
	if c.domains == nil {
		return st, false, nil
	}
	cur, err := c.currentDomain(ctx, in.Name)
	if err != nil {
		return "", false, fmt.Errorf("domain %s: %w", in.Name, err)
	}
	return st, cur != nil && cur.uuid == in.UUID && cur.running, nil
}

// UpdateLibvirtSecret gives the libvirt secret id of in's disk, if
// libvirt has it defined, the value pass (redefined on the same UUID and
// usage); updated is false when it has none.
func (c *Controller) UpdateLibvirtSecret(ctx context.Context, in *model.Instance, disk, id string, pass []byte) (updated bool, err error) {
	if c.libvirtSecrets == nil {
		return false, nil
	}
	usage := c.disks.SecretUsage(in.UUID, disk)
	ss, err := c.libvirtSecrets.Secrets(ctx, usage)
	if err != nil {
		return false, fmt.Errorf("libvirt secrets: %w", err)
	}
	for _, s := range ss {
		if s.UUID == id {
			if err := c.libvirtSecrets.DefineSecret(ctx, virt.LibvirtSecret{UUID: id, Usage: usage}, pass); err != nil {
				return false, fmt.Errorf("update libvirt secret %s: %w", id, err)
			}
			updated = true
		}
	}
	return updated, nil
}

// InstanceExists reports whether an instance with the UUID is in the
// store, on any host.
func (c *Controller) InstanceExists(ctx context.Context, uuid string) (bool, error) {
	recs, err := c.store.Instances(ctx)
	if err != nil {
		return false, fmt.Errorf("instances: %w", err)
	}
	return slices.ContainsFunc(recs, func(rec store.Instance) bool { return strings.EqualFold(rec.UUID, uuid) }), nil
}
