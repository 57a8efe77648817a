package shares

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/store"
)

// Start runs the reconciler: one pass now (for instances deleted and
// steps interrupted while hostctl was down), then one every interval,
// until Close.
func (s *Service) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.stop, s.done = cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		if err := s.Reconcile(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("share reconcile", "err", err)
		}
		if s.interval < 0 {
			return
		}
		t := time.NewTicker(s.interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := s.Reconcile(ctx); err != nil && ctx.Err() == nil {
					s.log.Warn("share reconcile", "err", err)
				}
			}
		}
	}()
}

// Close stops the reconciler and waits for it.
func (s *Service) Close() error {
	s.once.Do(func() {
		if s.stop != nil {
			s.stop()
			<-s.done
		}
	})
	return nil
}

// Reconcile brings this host's mappings, share locks and host mounts in
// line with its instances:
//
//   - a mapping of an instance that no longer exists is detached (mount
//     released, share unlocked, mapping removed);
//   - a mapping left attaching (hostctl stopped mid-attach) is completed
//     (lock, redefine, inactive); one left detaching is completed;
//   - an active mapping of an instance that is not running becomes
//     inactive (its mount released), an inactive one of a running
//     instance active (its mount taken);
//   - a mapping in error (a failed unmount or mount) of an instance that
//     is not running has its host mount released again (the unmount
//     retried) and becomes inactive when that succeeds;
//   - a share lock held by an instance of this host without a mapping is
//     released;
//   - the mount reference counts are rebuilt from the active mappings,
//     and every NFS mount no instance on this host uses is unmounted.
//
// Each step is retried on the next pass when it fails; no host mount is
// kept for a deleted instance.
func (s *Service) Reconcile(ctx context.Context) error {
	s.reconcileMu.Lock()
	defer s.reconcileMu.Unlock()
	recs, err := s.st.Instances(ctx)
	if err != nil {
		return fmt.Errorf("share reconcile: %w", err)
	}
	byUUID := make(map[string]store.Instance, len(recs))
	for _, r := range recs {
		byUUID[r.UUID] = r
	}
	all, err := mappings(ctx, s.st, "")
	if err != nil {
		return fmt.Errorf("share reconcile: %w", err)
	}
	var errs []error
	users := map[string][]string{}
	mapped := map[string]bool{}
	for _, m := range all {
		rec, exists := byUUID[m.Instance]
		if !exists && m.Host != "" && s.host != "" && m.Host != s.host {
			continue // another host's instance's mapping: that host cleans it
		}
		if exists && !s.owns(rec) {
			continue
		}
		if s.isApplying(m.Instance) {
			// An apply attaching the shares its spec names is under
			// way (the instance may not be stored yet): it finishes or
			// undoes them itself.
			mapped[m.Instance+"/"+m.ShareID] = true
			continue
		}
		if err := s.reconcileMapping(ctx, m, rec, exists, users); err != nil {
			errs = append(errs, err)
		}
		mapped[m.Instance+"/"+m.ShareID] = true
	}
	// Locks without a mapping (an attach undone half-way, a crash).
	shs, err := listShares(ctx, s.st)
	if err != nil {
		errs = append(errs, err)
	}
	for _, sh := range shs {
		if err := s.revokeUnheld(ctx, sh); err != nil {
			// A detach that unlocked the share and stopped before the
			// revoke: done now.
			errs = append(errs, err)
		}
		for _, h := range sh.Holders {
			if mapped[h.Instance+"/"+sh.ID] || (h.Host != "" && s.host != "" && h.Host != s.host) {
				continue
			}
			if _, err := loadMapping(ctx, s.st, h.Instance, sh.ID); !errors.Is(err, store.ErrNotFound) {
				continue // created meanwhile (an attach in progress)
			}
			s.log.Warn("share locked by an instance without a mapping; unlocking", "share", sh.ID, "instance", h.Instance)
			if u, err := unlock(ctx, s.st, sh.ID, h.Instance); err != nil {
				errs = append(errs, err)
			} else if err := s.revokeUnheld(ctx, u); err != nil {
				errs = append(errs, err)
			}
		}
	}
	first := !s.rebuilt
	s.rebuilt = true
	if first && s.cephx != nil && s.cephx.Configured(ctx) {
		// A grant or revoke recorded before a crash and not yet in
		// Ceph: the caps of every generation set again from the record.
		if err := s.cephx.Sync(ctx); err != nil {
			errs = append(errs, fmt.Errorf("CephX capabilities: %w", err))
		}
		if err := s.mounts.forgetCephMounts(ctx); err != nil {
			errs = append(errs, fmt.Errorf("CephFS mount records: %w", err))
		}
	}
	if _, err := s.mounts.Rebuild(users, first); err != nil {
		errs = append(errs, err)
	} else if err := s.mounts.Sweep(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// reconcileMapping reconciles one mapping of this host; users collects the
// instances that use each NFS share now.
func (s *Service) reconcileMapping(ctx context.Context, m Mapping, rec store.Instance, exists bool, users map[string][]string) error {
	if !exists {
		s.log.Warn("share mapping of a deleted instance; detaching", "share", m.ShareID, "instance", m.InstanceName)
		return s.cleanup(ctx, m)
	}
	unlockInst := s.locks.Lock(m.Instance)
	defer unlockInst()
	// Re-read under the lock: an attach or detach may have moved it.
	cur, err := loadMapping(ctx, s.st, m.Instance, m.ShareID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	m = cur
	if rec.Host != "" && m.Host != rec.Host {
		// The instance was adopted by this host: its mappings follow.
		s.log.Info("share mapping follows its adopted instance", "share", m.ShareID, "instance", m.InstanceName, "from", m.Host, "to", rec.Host)
		if err := rehost(ctx, s.st, &m, rec.Host); err != nil {
			return err
		}
	}
	switch m.Status {
	case types.ShareAttaching:
		s.log.Warn("share mapping left attaching; completing the attach", "share", m.ShareID, "instance", m.InstanceName)
		if _, err := lock(ctx, s.st, m.ShareID, Holder{Instance: m.Instance, Name: m.InstanceName, Host: m.Host}); err != nil {
			if errors.Is(err, store.ErrNotFound) { // the share is gone: undo
				_ = transition(ctx, s.st, &m, types.ShareDetaching, "the share was deleted", types.ShareAttaching)
				return s.finishDetach(ctx, m, true)
			}
			return err
		}
		if err := s.reapply(ctx, m.InstanceName); err != nil {
			return fmt.Errorf("complete attach of %v: %w", m, err)
		}
		if err := transition(ctx, s.st, &m, types.ShareInactive, "", types.ShareAttaching); err != nil {
			return err
		}
		s.emit(ctx, EventAttached, m)
		return nil
	case types.ShareDetaching:
		s.log.Warn("share mapping left detaching; completing the detach", "share", m.ShareID, "instance", m.InstanceName)
		return s.finishDetach(ctx, m, true)
	}
	state, err := s.inst.DomainState(ctx, rec.Name)
	if err != nil {
		return err
	}
	running := state == "running" || state == "paused" || state == "blocked"
	switch {
	case m.Status == types.ShareError && !running && state != StateUnknown:
		// Left in error by an unmount (or a mount) that failed: retry
		// the unmount; once it succeeds the mapping is inactive again.
		if err := s.recoverError(ctx, &m); err != nil {
			return fmt.Errorf("%v: still in error: %w (retried on the next pass)", m, err)
		}
		return nil
	case m.Status == types.ShareActive && !running && state != StateUnknown:
		s.log.Info("instance no longer runs; share mapping inactive", "share", m.ShareID, "instance", m.InstanceName, "state", state)
		return transition(ctx, s.st, &m, types.ShareInactive, "", types.ShareActive)
	case m.Status == types.ShareInactive && running:
		if hostMounted(m.Proto) {
			if err := s.mounts.acquire(ctx, m.ShareID, m.Proto, m.Export, m.Instance); err != nil {
				return transition(ctx, s.st, &m, types.ShareError, err.Error(), types.ShareInactive)
			}
		}
		if err := transition(ctx, s.st, &m, types.ShareActive, "", types.ShareInactive); err != nil {
			return err
		}
	}
	if m.Status == types.ShareActive && hostMounted(m.Proto) {
		users[m.ShareID] = append(users[m.ShareID], m.Instance)
	}
	return nil
}

// isApplying reports whether an apply attaching shares to the instance is
// under way (attachFromSpec).
func (s *Service) isApplying(uuid string) bool {
	s.applyingMu.Lock()
	defer s.applyingMu.Unlock()
	return s.applying[uuid] > 0
}
