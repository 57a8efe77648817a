package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/store"
)

// Adopt and the forced delete from the store (forcedelete.go): the
// operations on another host's instance after that host died, composed
// from the core's host ownership (hostctl/controller, hosts.go and
// core_ops.go) and the parts' phases for a stored instance.

// Owners is host ownership of the store's instance records, the core's:
// whose a record is, whether its owner is alive, the owner changed in one
// compare-and-swap, or the record forgotten.
type Owners interface {
	// Host is this host's name ("" when hosts are not tracked).
	Host() string
	// Instance is the store's record of instance name, of any host.
	Instance(ctx context.Context, name string) (store.Instance, error)
	// Owns reports whether rec is this host's to manage.
	Owns(rec store.Instance) bool
	// OwnerDown returns nil when rec's host is down, else an error
	// wrapping controller.ErrOwnerAlive; what names the operation.
	OwnerDown(ctx context.Context, what string, rec store.Instance) error
	// TakeOver writes this host's name into rec at rec.Revision
	// (store.ErrConflict when the record changed since).
	TakeOver(ctx context.Context, rec store.Instance) (store.Instance, error)
	// Forget removes rec from the store, the parts that act on a forced
	// delete told (AfterDelete).
	Forget(ctx context.Context, rec store.Instance) error
}

// RecordParts is the parts' phases for a stored instance of any host,
// and its config drive rebuilt here.
type RecordParts interface {
	CheckRecordParts(ctx context.Context, op part.Op, rec store.Instance) error
	CommittedRecordParts(ctx context.Context, op part.Op, rec store.Instance) []string
	EnsureDrive(ctx context.Context, rec store.Instance) error
}

// stateKeeper is the part that keeps the instances' states (shelved,
// rescued: hostctl/parts/vmstate), as an adopt reads them.
type stateKeeper interface {
	State(ctx context.Context, uuid string) (string, error)
}

// noStateKeeper: no part keeps states; no instance has one.
type noStateKeeper struct{}

func (noStateKeeper) State(context.Context, string) (string, error) { return "", nil }

// stateKeeperOf is the part among parts that keeps the instances'
// states, noStateKeeper without one.
func stateKeeperOf(parts []part.Part) stateKeeper {
	for _, p := range parts {
		if s, ok := p.(stateKeeper); ok {
			return s
		}
	}
	return noStateKeeper{}
}

// adopter adopts and force-deletes another host's instances.
type adopter struct {
	base
	owners Owners
	parts  RecordParts
	states stateKeeper
}

// Adopt makes this host the owner of another host's instance, for an
// operator who moved its disks here after that host died. It is refused
// while the owner's heartbeat is fresh. The record changes in one
// compare-and-swap, so of two hosts adopting at once exactly one wins.
// The domain is not defined here: `instance apply` (or start, which
// reconciles) does that with this host's disks.
func (o *adopter) Adopt(ctx context.Context, name string) (_ *controller.Instance, err error) {
	defer o.frame.Observe("adopt", time.Now(), &err)
	defer o.frame.LockInstance(name)()
	rec, err := o.owners.Instance(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("adopt %s: %w", name, err)
	}
	host := o.owners.Host()
	if rec.Host == host {
		return nil, fmt.Errorf("adopt %s: %w: it already lives on %s", name, controller.ErrState, host)
	}
	if err := o.owners.OwnerDown(ctx, "adopt "+name, rec); err != nil {
		return nil, err
	}
	if err := o.parts.CheckRecordParts(ctx, part.Adopt, rec); err != nil { // a shelved instance only where its image is
		return nil, err
	}
	prev := rec.Host
	rec, err = o.owners.TakeOver(ctx, rec)
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, o.adoptConflict(ctx, name, prev, err)
		}
		return nil, fmt.Errorf("adopt %s: %w", name, err)
	}
	o.log.Info("instance adopted", "name", name, "from", prev, "host", host)
	o.parts.CommittedRecordParts(ctx, part.Adopt, rec) // the share mappings follow, a rescue ends
	if st, _ := o.states.State(ctx, rec.UUID); st != "" {
		// No instance files while shelved: unshelve's start builds the
		// drive.
		return o.frame.Get(ctx, name)
	}
	if err := o.parts.EnsureDrive(ctx, rec); err != nil {
		o.log.Warn("adopted; the config drive could not be rebuilt here yet", "name", name, "err", err)
	}
	return o.frame.Get(ctx, name)
}

// adoptConflict explains a lost compare-and-swap of Adopt: the record
// changed since it was read, most often because another host adopted it
// at the same moment (then the error names that host).
func (o *adopter) adoptConflict(ctx context.Context, name, prev string, err error) error {
	now, rerr := o.owners.Instance(ctx, name)
	switch {
	case rerr == nil && now.Host != prev && now.Host != o.owners.Host():
		return fmt.Errorf("adopt %s: %w: %s lives on %s now: that host adopted it at the same time", name, err, name, now.Host)
	case errors.Is(rerr, store.ErrNotFound):
		return fmt.Errorf("adopt %s: %w: the record was deleted while adopting it", name, err)
	}
	return fmt.Errorf("adopt %s: %w: the record changed while adopting it (its owner wrote it)", name, err)
}
