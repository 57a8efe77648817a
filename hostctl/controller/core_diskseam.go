package controller

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// What the disks part (hostctl/parts/disks, its Core interface), the
// disk passphrase rotator (hostctl/diskrotate, its Core interface) and
// the operations (hostctl/ops) need of the core about instances: the
// per-instance lock, an instance's record, its state and whether its
// domain runs. The disks' files, their block-device records, libvirt's
// secrets and the key manager are the disks part's, which the daemon
// wires itself.

// LockInstance takes the per-instance lock every operation on the named
// instance holds, and returns its release.
func (c *Controller) LockInstance(name string) (unlock func()) { return c.locks.Lock(name) }

// OwnInstance returns this host's instance named name (an error
// wrapping store.ErrNotFound when there is none, ErrOtherHost when it is
// another host's).
func (c *Controller) OwnInstance(ctx context.Context, name string) (*model.Instance, error) {
	rec, err := c.OwnRecord(ctx, "instance", name)
	if err != nil {
		return nil, err
	}
	return decodeSpec(rec)
}

// Instance is the store's record of instance name, of any host
// (hostctl/ops: adopt and forced delete).
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
