package controller

import (
	"context"

	"github.com/vmeta/vmeta/hostctl/reconcile"
)

// The tests that need the whole core reach the reconciler
// (hostctl/reconcile) through these: it is wired over the core as the
// daemon wires it, with the test's hypervisor and disks part, and no
// periodic pass.

// newController is New (the tests' name for it since New started the
// reconciler and newController did not).
func newController(st Store, opts Options) *Controller { return New(st, opts) }

// Reconcile runs one reconcile pass over every instance (none without a
// hypervisor).
func (c *Controller) Reconcile(ctx context.Context) error {
	if c.domains == nil {
		return nil
	}
	return c.reconciler().Reconcile(ctx)
}

// startReconciler starts a reconciler of c that follows its hypervisor's
// events; the caller closes it.
func (c *Controller) startReconciler() *reconcile.Reconciler {
	rc := c.reconciler()
	rc.Start()
	return rc
}

func (c *Controller) reconciler() *reconcile.Reconciler {
	var dk reconcile.Disks // the disks part, as the daemon hands it (none: nil)
	if d, ok := c.disks.(reconcile.Disks); ok {
		dk = d
	}
	return reconcile.New(c, reconcile.Options{Domains: c.domains.(reconcile.Domains), Disks: dk, Interval: -1, Logger: c.log})
}
