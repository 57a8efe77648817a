package controller

import (
	"context"

	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/store"
)

// What the disks part (hostctl/parts/disks, its Core interface) asks of
// the core: the per-instance lock (LockInstance, core_diskrotate.go) and
// UnlessRunning. The daemon wires its handles (key manager, LUKS tool,
// libvirt secrets, records, image catalog) itself.

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
