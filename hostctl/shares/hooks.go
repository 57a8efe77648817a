package shares

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// The controller calls the methods of this file (controller.ShareHooks)
// around its own work on an instance, holding the instance's lock.

var _ controller.ShareHooks = (*Service)(nil)

// SpecShares merges an instance's mappings into the shares of its spec
// on every apply: a mapped share (attaching, inactive, active, error) is
// in it with its tag and host directory, one detaching is not. A share of
// the registry without a mapping is not; shares the spec lists that are
// not in the registry (a share line written in the spec) stay.
func (s *Service) SpecShares(ctx context.Context, uuid string, specShares []model.Share) ([]model.Share, error) {
	if uuid == "" {
		return specShares, nil
	}
	ms, err := mappings(ctx, s.st, uuid)
	if err != nil {
		return nil, err
	}
	var out []model.Share
	for i, x := range specShares {
		for _, m := range ms {
			if m.Status != types.ShareDetaching && !strings.EqualFold(x.ShareID, m.ShareID) && x.EffectiveTag() == m.Tag {
				return nil, field(fmt.Sprintf("shares[%d].tag", i), x.EffectiveTag(), "is the tag of share %s, attached to the instance through the share registry (hostctl share mappings)", m.ShareID)
			}
		}
		if slices.ContainsFunc(ms, func(m Mapping) bool { return strings.EqualFold(x.ShareID, m.ShareID) }) {
			continue // the mapping decides, below
		}
		// A share of the registry reaches an instance only through a
		// mapping: one left in the stored spec (an undone attach) goes.
		_, err := loadShare(ctx, s.st, strings.ToLower(x.ShareID))
		switch {
		case err == nil:
			continue
		case !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
		out = append(out, x)
	}
	for _, m := range ms {
		out = slices.DeleteFunc(out, func(x model.Share) bool { return strings.EqualFold(x.ShareID, m.ShareID) })
		if m.Status != types.ShareDetaching {
			out = append(out, model.Share{ShareID: m.ShareID, Tag: m.Tag, Source: s.sourceOf(m)})
		}
	}
	return out, nil
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
				return fmt.Errorf("%w: %v is in error and could not be made inactive again: %v; a start needs every share inactive (the reconciler retries; or hostctl share detach)", controller.ErrState, m, err)
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
