package controller

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/hosts"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/store"
)

// Many hosts share one store; each hostctl owns the instances whose
// record names it (store.Instance.Host) and acts only on those: apply,
// start, stop, hot-plug, delete, config drives, DHCP entries and
// reconciling. Another host's instance can be shown and listed, never
// changed. Ownership changes only through an adopt (hostctl/ops, adopt.go,
// over TakeOver: core_ops.go), one compare-and-swap on the record,
// and only while the owner is down. A record without a host
// (written before hosts were tracked) belongs to whichever host touches
// it next, which then writes its name into it.

// ErrOtherHost: the instance belongs to another host. The admin API
// answers 409.
var ErrOtherHost = errkind.New(errkind.Conflict, "another host's instance")

// ErrOwnerAlive: an adopt or a forced delete of another host's instance
// while that host's heartbeat is fresh (OwnerDown, core_ops.go).
// The admin API answers 409.
var ErrOwnerAlive = errkind.New(errkind.Conflict, "the owning host is alive")

// Hosts knows the liveness of the hosts sharing the store (their
// heartbeats: hosts.Registry).
type Hosts interface {
	// HostDown tells whether a host is down (its heartbeat silent for
	// longer than the configured time, or stopped); why describes the
	// heartbeat for error messages ("last seen 3m0s ago").
	HostDown(ctx context.Context, host string) (down bool, why string, err error)
}

// owns reports whether rec is this host's to manage (hosts.Owns).
func (c *Controller) owns(rec store.Instance) bool { return hosts.Owns(c.hostName, rec.Host) }

// OwnRecord returns the record of the instance named name for op, or
// ErrOtherHost naming its owner.
func (c *Controller) OwnRecord(ctx context.Context, op, name string) (store.Instance, error) {
	rec, err := c.store.Instance(ctx, name)
	if err != nil {
		return store.Instance{}, fmt.Errorf("%s %s: %w", op, name, err)
	}
	if !c.owns(rec) {
		return store.Instance{}, c.otherHost(op, rec)
	}
	return rec, nil
}

func (c *Controller) otherHost(op string, rec store.Instance) error {
	return fmt.Errorf("%s %s: %w: %s lives on %s (this is %s)", op, rec.Name, ErrOtherHost, rec.Name, rec.Host, c.hostName)
}

// Host is the name of the host this controller runs for ("" when hosts
// are not tracked).
func (c *Controller) Host() string { return c.hostName }
