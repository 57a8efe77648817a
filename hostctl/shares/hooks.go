package shares

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// The controller calls the methods of this file (controller.ShareHooks)
// around its own work on an instance, holding the instance's lock.

var _ controller.ShareHooks = (*Service)(nil)

// SpecShares decides the shares of an instance on every apply: they are
// its mappings. A mapped share (attaching, inactive, active, error) is in
// the result with its tag and host directory, one detaching is not.
//
// The spec names shares of the registry by share_id, and a spec entry is
// one of:
//
//   - a share the instance has a mapping for: the mapping decides (the
//     entry's tag must be the mapping's, or left out; a source must be the
//     one hostctl recorded, as in an instance shown and applied again);
//   - an entry of the stored spec without a mapping any more (an attach
//     undone): dropped;
//   - a share the instance does not have yet: attached through the same
//     steps as `hostctl share attach` (checkAttach, beginAttach, and
//     finishAttach when the apply succeeded; undone when it failed), with
//     the attach's rules: the instance SHUTOFF (or new, with a
//     hypervisor), the share the instance's project's, its tag unused.
//
// Everything else is refused before anything changes, with the field:
// an unknown share_id (register the share first), a source written in a
// spec (a share's directory is the registry's, inside the share root), a
// share line from before the registry (not in it).
func (s *Service) SpecShares(ctx context.Context, a controller.ShareApply) ([]model.Share, func(error), error) {
	if a.UUID == "" {
		return a.Shares, nil, nil
	}
	ms, err := mappings(ctx, s.st, a.UUID)
	if err != nil {
		return nil, nil, err
	}
	mapped := func(id string) (Mapping, bool) {
		i := slices.IndexFunc(ms, func(m Mapping) bool { return strings.EqualFold(m.ShareID, id) })
		if i < 0 {
			return Mapping{}, false
		}
		return ms[i], true
	}
	var errs []model.FieldError
	bad := func(i int, f string, v any, format string, args ...any) {
		errs = append(errs, model.FieldError{Field: fmt.Sprintf("shares[%d].%s", i, f), Value: v, Rule: fmt.Sprintf(format, args...)})
	}
	var requests []shareTag
	for i, x := range a.Shares {
		id := strings.ToLower(x.ShareID)
		// stored: the entry is the stored spec's own (an apply of the
		// stored spec, or of an instance shown), source and all.
		stored := x.Source != "" && slices.ContainsFunc(a.Old, func(o model.Share) bool {
			return strings.EqualFold(o.ShareID, id) && o.Source == x.Source && o.EffectiveTag() == x.EffectiveTag()
		})
		if m, ok := mapped(id); ok {
			switch {
			case m.Status == types.ShareDetaching || stored:
			case x.Tag != "" && x.Tag != m.Tag && x.Tag != id:
				bad(i, "tag", x.Tag, "share %s is attached with tag %q; a tag is chosen when the share is attached (detach it and attach it again to change it)", m.ShareID, m.Tag)
			case x.Source != "" && x.Source != s.sourceOf(m):
				bad(i, "source", x.Source, "is not the directory of share %s: a spec does not give a share's directory (the share registry does); leave source out", m.ShareID)
			}
			continue
		}
		if x.Source != "" && !stored {
			bad(i, "source", x.Source, "%s", s.sourceRule(x.Source))
		}
		sh, err := loadShare(ctx, s.st, id)
		switch {
		case errors.Is(err, store.ErrNotFound) && stored:
			bad(i, "share_id", x.ShareID, "is a share written into the spec with its directory, which is no longer how an instance gets a share: register it (hostctl share create --id %s, under the share root) and apply again, or remove the entry", id)
			continue
		case errors.Is(err, store.ErrNotFound):
			bad(i, "share_id", x.ShareID, "is not a share of the share registry: an administrator registers it first (hostctl share create --id %s --proto local|nfs --export ... --project ...), then the spec attaches it", id)
			continue
		case err != nil:
			return nil, nil, err
		case stored:
			continue // in the stored spec without a mapping: an attach undone
		}
		if x.Source != "" {
			continue // refused above
		}
		requests = append(requests, shareTag{sh: sh, tag: x.EffectiveTag()})
	}
	if len(errs) > 0 {
		return nil, nil, &model.SpecError{Errors: errs}
	}
	var done func(error)
	if len(requests) > 0 {
		tgt := attachTarget{UUID: a.UUID, Name: a.Name, Host: s.host, Project: a.Project}
		state := "shutoff" // a new instance's domain is defined shut off
		if !a.New {
			inst, err := s.inst.Get(ctx, a.Name)
			if err != nil {
				return nil, nil, err
			}
			state, tgt.Host = inst.State, inst.Host
		} else if !a.Hypervisor {
			state = ""
		}
		if tgt.Host == "" {
			tgt.Host = s.host
		}
		if err := attachable(a.Name, state); err != nil {
			return nil, nil, fmt.Errorf("attach share %s: %w", requests[0].sh.ID, err)
		}
		if err := s.checkSupport(ctx); err != nil {
			return nil, nil, fmt.Errorf("attach share %s to %s: %w", requests[0].sh.ID, a.Name, err)
		}
		for _, q := range requests {
			if err := tgt.checkProject(q.sh); err != nil {
				return nil, nil, err
			}
			// The spec's own tags are unique (model.Validate): the
			// mappings' are what an attached share must not reuse.
			if err := s.checkAttach(tgt, q.sh, q.tag, ms, nil); err != nil {
				return nil, nil, err
			}
		}
		if done, err = s.attachFromSpec(ctx, tgt, requests); err != nil {
			return nil, nil, err
		}
		if ms, err = mappings(ctx, s.st, a.UUID); err != nil {
			done(err)
			return nil, nil, err
		}
	}
	var out []model.Share
	for _, m := range ms {
		if m.Status != types.ShareDetaching {
			out = append(out, model.Share{ShareID: m.ShareID, Tag: m.Tag, Source: s.sourceOf(m)})
		}
	}
	return out, done, nil
}

// shareTag is a share a spec attaches, and its tag.
type shareTag struct {
	sh  Share
	tag string
}

// attachFromSpec begins the attach of each share a spec names that the
// instance does not have yet (mapping attaching, share locked), and
// returns what finishes them once the apply ended: inactive when it
// succeeded, undone when it failed. Until then the reconciler leaves the
// instance's mappings alone (the instance may not be stored yet).
func (s *Service) attachFromSpec(ctx context.Context, tgt attachTarget, qs []shareTag) (func(error), error) {
	s.applyingMu.Lock()
	if s.applying == nil {
		s.applying = map[string]int{}
	}
	s.applying[tgt.UUID]++
	s.applyingMu.Unlock()
	unmark := func() {
		s.applyingMu.Lock()
		if s.applying[tgt.UUID]--; s.applying[tgt.UUID] <= 0 {
			delete(s.applying, tgt.UUID)
		}
		s.applyingMu.Unlock()
	}
	r := revert.New(s.log, "attach the shares of the spec of "+tgt.Name)
	var begun []*Mapping
	for _, q := range qs {
		m := tgt.mapping(q.sh, q.tag)
		if err := s.beginAttach(ctx, r, &m); err != nil {
			r.Fail(&err)
			unmark()
			return nil, err
		}
		begun = append(begun, &m)
	}
	return func(applyErr error) {
		defer unmark()
		// The apply is over: its outcome is recorded even if its caller
		// went away meanwhile.
		ctx := context.WithoutCancel(ctx)
		if applyErr != nil {
			r.Fail(&applyErr)
			return
		}
		r.Success()
		for _, m := range begun {
			// The instance is redefined with the share: what is left
			// (a failed write) the reconciler completes.
			if err := s.finishAttach(ctx, m); err != nil {
				s.log.Warn("share attached by a spec left attaching (the reconciler completes it)", "share", m.ShareID, "instance", m.InstanceName, "err", err)
			}
		}
	}, nil
}

// sourceRule says why a spec's shares[].source is refused: a spec does
// not give a share's directory, and one with '..' or outside the share
// root could never be one.
func (s *Service) sourceRule(source string) string {
	const how = "a spec does not give a share's directory: an administrator registers the directory as a share (hostctl share create --proto local --export DIR, DIR under the share root) and the spec names it by share_id; leave source out"
	if err := model.ValidateShareSource(source); err != nil {
		return err.Error()
	}
	root, err := filepath.EvalSymlinks(s.root.Dir)
	if err != nil {
		root = filepath.Clean(s.root.Dir)
	}
	if c := filepath.Clean(source); c != root && !strings.HasPrefix(c, root+string(filepath.Separator)) {
		return "is outside the share root " + s.root.Dir + ": " + how
	}
	return how
}

// PrepareStart mounts the NFS shares of an instance about to start (once
// per host: a share mounted for another instance is reused). A share
// whose mount fails moves to error and the start is refused with
// controller.ErrMountFailed: the controller marks the instance ERROR,
// and only a hard reboot (controller.Reboot) retries the mount. A mapping still attaching or detaching
// refuses the start.
func (s *Service) PrepareStart(ctx context.Context, uuid string) error {
	ms, err := mappings(ctx, s.st, uuid)
	if err != nil {
		return err
	}
	var acquired []Mapping
	release := func() {
		for _, m := range acquired {
			if err := s.mounts.Release(ctx, m.ShareID, m.Instance); err != nil {
				s.log.Warn("release share mount after a failed start", "share", m.ShareID, "err", err)
			}
		}
	}
	for _, m := range ms {
		switch m.Status {
		case types.ShareAttaching, types.ShareDetaching:
			release()
			return fmt.Errorf("%w: %v is %s; start the instance once it is done (the reconciler completes it)", controller.ErrState, m, m.Status)
		case types.ShareError:
			// Only inactive mappings start. One in error is brought back
			// first, as the reconciler does: its host mount released
			// (the unmount that failed retried); if that fails again,
			// the start is refused naming it.
			if err := s.recoverError(ctx, &m); err != nil {
				release()
				return fmt.Errorf("%w: %v is in error and could not be made inactive again: %w; a start needs every share inactive (the reconciler retries; or hostctl share detach)", controller.ErrState, m, err)
			}
		case types.ShareInactive, types.ShareActive:
		default:
			release()
			return fmt.Errorf("%w: %v is %s; a start needs every share inactive", controller.ErrState, m, m.Status)
		}
		if m.Proto != types.ShareProtoNFS {
			continue
		}
		if err := s.mounts.Acquire(ctx, m.ShareID, m.Export, m.Instance); err != nil {
			release()
			reason := err.Error()
			if terr := transition(ctx, s.st, &m, types.ShareError, reason, types.ShareInactive, types.ShareActive, types.ShareError); terr != nil {
				s.log.Warn("could not mark the share mapping error", "share", m.ShareID, "err", terr)
			}
			s.instanceUpdate(ctx, uuid, m.InstanceName)
			// controller.ErrMountFailed: the controller marks the instance
			// ERROR with this text (it names the share, never the export).
			return &controller.MountError{Share: m.ShareID, Instance: m.InstanceName, Err: err}
		}
		acquired = append(acquired, m)
	}
	return nil
}

// StartDone is told how the start that PrepareStart prepared ended: on
// success every mapping becomes active; on failure the mounts taken for
// it are released.
func (s *Service) StartDone(ctx context.Context, uuid string, startErr error) {
	ms, err := mappings(ctx, s.st, uuid)
	if err != nil {
		s.log.Warn("share mappings after start", "instance", uuid, "err", err)
		return
	}
	for _, m := range ms {
		if startErr != nil {
			if m.Proto == types.ShareProtoNFS && slices.Contains(s.mounts.Users(m.ShareID), uuid) {
				if err := s.mounts.Release(ctx, m.ShareID, uuid); err != nil {
					s.log.Warn("release share mount after a failed start", "share", m.ShareID, "err", err)
				}
			}
			continue
		}
		if m.Status == types.ShareActive {
			continue
		}
		if err := transition(ctx, s.st, &m, types.ShareActive, "", types.ShareInactive, types.ShareError); err != nil {
			s.log.Warn("share mapping not marked active", "share", m.ShareID, "instance", m.InstanceName, "err", err)
		}
	}
	if startErr == nil && len(ms) > 0 {
		s.instanceUpdate(ctx, uuid, ms[0].InstanceName)
	}
}

// Stopped is told that an instance's domain stopped: its active mappings
// become inactive and their host mounts are released (unmounted when no
// other instance on the host uses them). A failed unmount moves the
// mapping to error (the reconciler retries the unmount).
func (s *Service) Stopped(ctx context.Context, uuid string) {
	ms, err := mappings(ctx, s.st, uuid)
	if err != nil {
		s.log.Warn("share mappings after stop", "instance", uuid, "err", err)
		return
	}
	changed := ""
	defer func() {
		if changed != "" {
			s.instanceUpdate(ctx, uuid, changed)
		}
	}()
	for _, m := range ms {
		if m.Status != types.ShareActive {
			continue
		}
		changed = m.InstanceName
		to, reason := types.ShareInactive, ""
		if m.Proto == types.ShareProtoNFS {
			if err := s.mounts.Release(ctx, m.ShareID, uuid); err != nil {
				to, reason = types.ShareError, err.Error()
				s.log.Warn("share not unmounted after stop", "share", m.ShareID, "err", err)
			}
		}
		if err := transition(ctx, s.st, &m, to, reason, types.ShareActive); err != nil {
			s.log.Warn("share mapping not moved after stop", "share", m.ShareID, "err", err)
		}
	}
}

// recoverError brings a mapping left in error (a host mount or unmount
// that failed) back to inactive for an instance that does not run: its
// NFS host mount is released for the instance (the unmount retried; kept
// when another instance on this host uses it), then the mapping moves to
// inactive. On failure the mapping stays in error with the new reason.
func (s *Service) recoverError(ctx context.Context, m *Mapping) error {
	if m.Proto == types.ShareProtoNFS {
		if err := s.mounts.Release(ctx, m.ShareID, m.Instance); err != nil {
			if terr := transition(ctx, s.st, m, types.ShareError, err.Error(), types.ShareError); terr != nil {
				s.log.Warn("share mapping error not updated", "share", m.ShareID, "err", terr)
			}
			return err
		}
	}
	if err := transition(ctx, s.st, m, types.ShareInactive, "", types.ShareError); err != nil {
		return err
	}
	s.log.Info("share mapping in error is inactive again (its host mount released)", "share", m.ShareID, "instance", m.InstanceName)
	s.instanceUpdate(ctx, m.Instance, m.InstanceName)
	return nil
}

// Deleted is told that an instance was deleted: each mapping is detached
// (mount released, share unlocked, mapping removed). What fails is left
// for the reconciler, which retries; the instance stays deleted.
func (s *Service) Deleted(ctx context.Context, uuid string) {
	ms, err := mappings(ctx, s.st, uuid)
	if err != nil {
		s.log.Warn("share mappings of a deleted instance left for the reconciler", "instance", uuid, "err", err)
		return
	}
	for _, m := range ms {
		if err := s.cleanup(ctx, m); err != nil {
			s.log.Warn("share mapping of a deleted instance left for the reconciler", "share", m.ShareID, "instance", m.InstanceName, "err", err)
		}
	}
}

// cleanup detaches a mapping of an instance that is gone.
func (s *Service) cleanup(ctx context.Context, m Mapping) error {
	if m.Status != types.ShareDetaching {
		if err := transition(ctx, s.st, &m, types.ShareDetaching, "", types.ShareAttaching, types.ShareInactive, types.ShareActive, types.ShareError); err != nil {
			return err
		}
	}
	return s.finishDetach(ctx, m, false)
}

// Refuse refuses op (resize, rebuild) on an instance with shares
// attached, as the specification does (409) until moves with shares are
// supported.
func (s *Service) Refuse(ctx context.Context, uuid, op string) error {
	ms, err := mappings(ctx, s.st, uuid)
	if err != nil {
		return err
	}
	if len(ms) == 0 {
		return nil
	}
	ids := make([]string, 0, len(ms))
	for _, m := range ms {
		ids = append(ids, m.ShareID)
	}
	return fmt.Errorf("%w: shares are attached (%s); %s is refused while a share is attached: detach them first", controller.ErrState, strings.Join(ids, ", "), op)
}
