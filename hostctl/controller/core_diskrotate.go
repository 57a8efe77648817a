package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// What the disk passphrase rotator (hostctl/diskrotate, its Core
// interface) needs of the core: this host's instances, the per-instance
// lock (the disks part's too), whether a domain runs. (The disks' files,
// their block-device records and libvirt's secrets are the disks
// part's: diskrotate.Disks.)

// LockInstance takes the per-instance lock every operation on the named
// instance holds, and returns its release.
func (c *Controller) LockInstance(name string) (unlock func()) { return c.locks.Lock(name) }

// OwnInstance returns this host's instance named name (an error
// wrapping store.ErrNotFound when there is none, ErrOtherHost when it is
// another host's).
func (c *Controller) OwnInstance(ctx context.Context, name string) (*model.Instance, error) {
	rec, err := c.ownRecord(ctx, "instance", name)
	if err != nil {
		return nil, err
	}
	return decodeSpec(rec)
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

// InstanceExists reports whether an instance with the UUID is in the
// store, on any host.
func (c *Controller) InstanceExists(ctx context.Context, uuid string) (bool, error) {
	recs, err := c.store.Instances(ctx)
	if err != nil {
		return false, fmt.Errorf("instances: %w", err)
	}
	return slices.ContainsFunc(recs, func(rec store.Instance) bool { return strings.EqualFold(rec.UUID, uuid) }), nil
}
