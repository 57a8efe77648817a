package daemon

import (
	"context"

	"github.com/vmeta/vmeta/hostctl/reconcile"
)

// startReconciler starts keeping the controller's instances in line with
// libvirt (hostctl/reconcile): a pass over every instance now, then on
// libvirt's events and every --reconcile-interval (0: only on events).
// Each pass kicks the key rotation loop. Nothing with --virt none.
func (s *serve) startReconciler(context.Context) error {
	if s.hv.conn == nil {
		return nil
	}
	interval := s.hv.cfg.Resync
	if interval == 0 {
		interval = -1
	}
	s.reconcile = reconcile.New(s.ctl, reconcile.Options{Domains: s.hv.conn, Disks: s.disks, Interval: interval,
		Reconciled: s.keyKick.kick, Logger: s.log})
	s.reconcile.Start()
	return nil
}

// stopReconciler stops the reconciler and waits for its pass under way.
func (s *serve) stopReconciler(context.Context) error {
	if s.reconcile != nil {
		s.reconcile.Close()
	}
	return nil
}
