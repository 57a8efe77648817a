package controller

import (
	"context"
	"sync/atomic"

	"github.com/vmeta/vmeta/internal/model"
)

// ShareHooks is the share service (hostctl/shares) as the controller
// calls it around its own work on an instance, with the instance's lock
// held: the mapped shares are merged into every apply, NFS shares are
// mounted before a start, and the mappings follow starts, stops and
// deletes.
type ShareHooks interface {
	// SpecShares returns the shares the instance's domain and metadata
	// must have: the spec's, with the instance's mapped shares merged in.
	SpecShares(ctx context.Context, uuid string, shares []model.Share) ([]model.Share, error)
	// PrepareStart mounts what the instance's shares need on the host; an
	// error refuses the start.
	PrepareStart(ctx context.Context, uuid string) error
	// StartDone is told how the start ended.
	StartDone(ctx context.Context, uuid string, err error)
	// Stopped is told that the instance's domain stopped.
	Stopped(ctx context.Context, uuid string)
	// Deleted is told that the instance was deleted.
	Deleted(ctx context.Context, uuid string)
	// Refuse returns an ErrState error when op (resize, rebuild) may not
	// run because shares are attached to the instance.
	Refuse(ctx context.Context, uuid, op string) error
}

type shareHooksBox struct{ h ShareHooks }

// SetShareHooks installs the share service (nil removes it). The daemon
// calls it once, right after New.
func (c *Controller) SetShareHooks(h ShareHooks) {
	if h == nil {
		c.shareHooks.Store(nil)
		return
	}
	c.shareHooks.Store(&shareHooksBox{h})
}

func (c *Controller) sharesHook() ShareHooks {
	if b := c.shareHooks.Load(); b != nil {
		return b.h
	}
	return nil
}

// shareHooksPtr is the controller's field type (an atomic pointer, so
// the hooks may be installed while the reconciler runs).
type shareHooksPtr = atomic.Pointer[shareHooksBox]
