package controller

import (
	"context"
	"fmt"
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
	// must have: the instance's mapped shares. A spec entry naming a
	// registered share the instance does not have yet is attached as an
	// attach request would be; done, when not nil, is called once with
	// the apply's outcome (nil: applied) to finish or undo those attaches.
	SpecShares(ctx context.Context, a ShareApply) (shares []model.Share, done func(err error), err error)
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

// ShareApply is what an apply tells the share service about the
// instance it applies.
type ShareApply struct {
	UUID, Name, Project string
	// Shares are the shares of the spec being applied.
	Shares []model.Share
	// Old are the shares of the stored spec (nil for a new instance).
	Old []model.Share
	// New: the instance does not exist yet.
	New bool
	// Hypervisor: the daemon runs with one (a new instance's domain is
	// defined shut off); without one an instance has no domain state.
	Hypervisor bool
}

// specShares runs the share service's SpecShares for an apply of in
// (old: the stored spec, nil for a new instance); done finishes it.
func (c *Controller) specShares(ctx context.Context, in, old *model.Instance) (func(error), error) {
	h := c.sharesHook()
	if h == nil {
		return func(error) {}, nil
	}
	a := ShareApply{UUID: in.UUID, Name: in.Name, Project: in.ProjectID, Shares: in.Shares, New: old == nil}
	if old != nil {
		a.Old = old.Shares
	}
	_, a.Hypervisor = c.drv.(libvirtDriver)
	shares, done, err := h.SpecShares(ctx, a)
	if err != nil {
		return nil, fmt.Errorf("apply %s: shares: %w", in.Name, err)
	}
	in.Shares = shares
	if done == nil {
		done = func(error) {}
	}
	return done, nil
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
