package controller

import (
	"context"
	"errors"
	"fmt"
	"github.com/vmeta/vmeta/hostctl/part"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/store"
)

// Many hosts share one store; each hostctl owns the instances whose
// record names it (store.Instance.Host) and acts only on those: apply,
// start, stop, hot-plug, delete, config drives, DHCP entries and
// reconciling. Another host's instance can be shown and listed, never
// changed. Ownership changes only through Adopt, one compare-and-swap on
// the record, and only while the owner is down. A record without a host
// (written before hosts were tracked) belongs to whichever host touches
// it next, which then writes its name into it.

// ErrOtherHost: the instance belongs to another host. The admin API
// answers 409.
var ErrOtherHost = errkind.New(errkind.Conflict, "another host's instance")

// ErrOwnerAlive: an adopt or a forced delete of another host's instance
// while that host's heartbeat is fresh. The admin API answers 409.
var ErrOwnerAlive = errkind.New(errkind.Conflict, "the owning host is alive")

// Hosts knows the hosts sharing the store (their heartbeats).
type Hosts interface {
	// HostDown tells whether a host is down (its heartbeat silent for
	// longer than the configured time, or stopped); why describes the
	// heartbeat for error messages ("last seen 3m0s ago").
	HostDown(ctx context.Context, host string) (down bool, why string, err error)
	// List returns every host's status, sorted by name.
	List(ctx context.Context) ([]types.HostStatus, error)
}

// Hosts returns the status of every host sharing the store (none when
// hosts are not tracked).
func (c *Controller) Hosts(ctx context.Context) ([]types.HostStatus, error) {
	if c.hosts == nil {
		return []types.HostStatus{}, nil
	}
	return c.hosts.List(ctx)
}

// owns reports whether rec is this host's to manage.
func (c *Controller) owns(rec store.Instance) bool {
	return rec.Host == "" || c.hostName == "" || rec.Host == c.hostName
}

// Count returns how many instances this host owns (List's length) from
// the records alone: List decodes and checks every spec, and the
// heartbeat counts every --heartbeat-interval (on a host of a thousand
// instances that cost tens of milliseconds of CPU per beat, and one
// record that no longer decodes stopped the heartbeat).
func (c *Controller) Count(ctx context.Context) (int, error) {
	recs, err := c.store.Instances(ctx)
	if err != nil {
		return 0, fmt.Errorf("count instances: %w", err)
	}
	n := 0
	for _, rec := range recs {
		if c.owns(rec) {
			n++
		}
	}
	return n, nil
}

// ownRecord returns the record of the instance named name for op, or
// ErrOtherHost naming its owner.
func (c *Controller) ownRecord(ctx context.Context, op, name string) (store.Instance, error) {
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

// Adopt makes this host the owner of another host's instance, for an
// operator who moved its disks here after that host died. It is refused
// while the owner's heartbeat is fresh. The record changes in one
// compare-and-swap, so of two hosts adopting at once exactly one wins.
// The domain is not defined here: `instance apply` (or start, which
// reconciles) does that with this host's disks.
func (c *Controller) Adopt(ctx context.Context, name string) (_ *Instance, err error) {
	defer c.observe("adopt", time.Now(), &err)
	defer c.locks.Lock(name)()
	rec, err := c.store.Instance(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("adopt %s: %w", name, err)
	}
	if rec.Host == c.hostName {
		return nil, fmt.Errorf("adopt %s: %w: it already lives on %s", name, ErrState, c.hostName)
	}
	if err := c.ownerDown(ctx, "adopt "+name, rec); err != nil {
		return nil, err
	}
	if err := c.checkRecordParts(ctx, part.Adopt, rec); err != nil { // parts.go (a shelved instance only where its image is)
		return nil, err
	}
	doc, err := c.store.Document(ctx, rec.UUID)
	if err != nil {
		return nil, fmt.Errorf("adopt %s: %w", name, err)
	}
	prev := rec.Host
	rec.Host = c.hostName
	if _, _, err := c.store.Put(ctx, rec, doc, rec.Revision); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, c.adoptConflict(ctx, name, prev, err)
		}
		return nil, fmt.Errorf("adopt %s: %w", name, err)
	}
	if c.notify != nil {
		c.notify.Invalidate(rec.UUID)
	}
	c.log.Info("instance adopted", "name", name, "from", prev, "host", c.hostName)
	c.committedRecordParts(ctx, part.Adopt, rec) // partphases.go (the share mappings follow, a rescue ends)
	if st, _ := c.states().State(ctx, rec.UUID); st != "" {
		// No instance files while shelved: unshelve's start builds the
		// drive.
		return c.Get(ctx, name)
	}
	if err := c.ensureDrive(ctx, rec); err != nil {
		c.log.Warn("adopted; the config drive could not be rebuilt here yet", "name", name, "err", err)
	}
	return c.Get(ctx, name)
}

// ForceDeleteFromStore removes the record (and published metadata) of an
// instance whose host is gone, touching nothing else: that host's domain,
// disks, files and DHCP entries are out of this host's reach. It is
// refused while the owner's heartbeat is fresh, and for this host's own
// instances (use Delete). It returns what it could not clean.
func (c *Controller) ForceDeleteFromStore(ctx context.Context, name string) (_ []string, err error) {
	defer c.observe("force_delete", time.Now(), &err)
	defer c.locks.Lock(name)()
	rec, err := c.store.Instance(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("delete %s from the store: %w", name, err)
	}
	if c.owns(rec) {
		return nil, fmt.Errorf("delete %s from the store: %w: it lives on this host (%s): use a plain delete, which cleans up here", name, ErrState, c.hostName)
	}
	if err := c.ownerDown(ctx, "delete "+name+" from the store", rec); err != nil {
		return nil, err
	}
	if err := c.checkRecordParts(ctx, part.ForceDelete, rec); err != nil { // parts.go
		return nil, err
	}
	if err := c.store.Delete(ctx, name); err != nil {
		return nil, fmt.Errorf("delete %s from the store: %w", name, err)
	}
	c.afterForceDeleteParts(ctx, rec) // the parts that act on it, for its owner (parts.go)
	if c.notify != nil {
		c.notify.Invalidate(rec.UUID)
	}
	left := []string{
		fmt.Sprintf("the domain %s, its disks and files on host %s (remove them there if the host comes back)", name, rec.Host),
		fmt.Sprintf("DHCP host entries of %s in host %s's libvirt network", name, rec.Host),
	}
	// The parts drop what they hold of it beyond its host (its share
	// mappings, its state record) and name what stays there.
	left = append(left, c.committedRecordParts(ctx, part.ForceDelete, rec)...) // partphases.go
	c.log.Warn("instance record removed from the store by force; its host's resources stay", "name", name, "host", rec.Host)
	return left, nil
}

// adoptConflict explains a lost compare-and-swap of Adopt: the record
// changed since it was read, most often because another host adopted it
// at the same moment (then the error names that host).
func (c *Controller) adoptConflict(ctx context.Context, name, prev string, err error) error {
	now, rerr := c.store.Instance(ctx, name)
	switch {
	case rerr == nil && now.Host != prev && now.Host != c.hostName:
		return fmt.Errorf("adopt %s: %w: %s lives on %s now: that host adopted it at the same time", name, err, name, now.Host)
	case errors.Is(rerr, store.ErrNotFound):
		return fmt.Errorf("adopt %s: %w: the record was deleted while adopting it", name, err)
	}
	return fmt.Errorf("adopt %s: %w: the record changed while adopting it (its owner wrote it)", name, err)
}

// ownerDown returns nil when rec's host is down, else ErrOwnerAlive; what
// names the refused operation ("adopt web-1").
func (c *Controller) ownerDown(ctx context.Context, what string, rec store.Instance) error {
	if rec.Host == "" {
		return nil
	}
	if c.hosts == nil {
		return fmt.Errorf("%s: %w: this hostctl does not track hosts, so it cannot tell whether %s is down", what, ErrOwnerAlive, rec.Host)
	}
	down, why, err := c.hosts.HostDown(ctx, rec.Host)
	if err != nil {
		return fmt.Errorf("%s: owner %s: %w", what, rec.Host, err)
	}
	if !down {
		return fmt.Errorf("%s: %w: %s lives on %s, whose heartbeat is fresh (%s)", what, ErrOwnerAlive, rec.Name, rec.Host, why)
	}
	return nil
}
