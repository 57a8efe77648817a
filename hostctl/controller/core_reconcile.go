package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// What the reconciler (hostctl/reconcile, wired by the daemon) asks of
// the core: this host's instances, each under its lock, the parts told
// of a domain that stopped by itself or asked whether their transport
// drifted, and a republish of what the domain still has.

// Owned names the instances this host owns.
func (c *Controller) Owned(ctx context.Context) ([]string, error) {
	recs, err := c.store.Instances(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, rec := range recs {
		if c.owns(rec) { // another host's domain is not in this libvirt
			names = append(names, rec.Name)
		}
	}
	return names, nil
}

// Hold takes the lock of the instance named name and returns its record
// and spec; rec is nil when there is none, it is another host's, or it
// is shelved or rescued (no domain, or another definition: left to
// unshelve and unrescue, core_vmstate.go). release ends the hold.
func (c *Controller) Hold(ctx context.Context, name string) (rec *store.Instance, spec *model.Instance, release func(), err error) {
	release = c.locks.Lock(name)
	r, err := c.store.Instance(ctx, name)
	if errors.Is(err, store.ErrNotFound) || err == nil && !c.owns(r) {
		return nil, nil, release, nil
	}
	if err != nil {
		return nil, nil, release, err
	}
	if st, err := c.states().State(ctx, r.UUID); err != nil || st != "" {
		return nil, nil, release, err
	}
	in, err := decodeSpec(r)
	if err != nil {
		return nil, nil, release, err
	}
	return &r, in, release, nil
}

// Stopped tells the parts that rec's domain went off by itself.
func (c *Controller) Stopped(ctx context.Context, rec store.Instance) {
	c.afterRecordParts(ctx, "stop", rec) // phases.go
}

// Drifted says how a Publisher part's transport of spec no longer
// agrees with its setting or the stored revision rev (the reconciler then
// publishes spec again): the first part's name and reason, "" when none.
func (c *Controller) Drifted(ctx context.Context, spec *model.Instance, rev int64) (partName, reason string) {
	return c.parts.Drifted(ctx, &part.Instance{Spec: spec}, rev)
}

// Republish publishes next in place of rec's spec old, after the parts'
// Defined phase (phases.go); a failure undoes both.
func (c *Controller) Republish(ctx context.Context, rec store.Instance, old, next *model.Instance) (err error) {
	r := revert.New(c.log, "reconcile "+rec.Name)
	defer r.Fail(&err)
	if err := c.parts.Defined(ctx, part.Apply, &part.Instance{Spec: next, Old: old}, r); err != nil {
		return fmt.Errorf("republish %s: %w", rec.Name, err)
	}
	_, err = c.publish(ctx, r, next, rec.Revision)
	return err
}
