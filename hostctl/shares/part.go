package shares

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// The Service is the shares part of the controller core (hostctl/part):
// the daemon registers it, and the core calls the phases of this file
// around its own work on an instance, holding the instance's lock.
var (
	_ part.Part      = (*Service)(nil)
	_ part.Completer = (*Service)(nil)
	_ part.Committer = (*Service)(nil)
	_ part.Starter   = (*Service)(nil)
)

// Name implements part.Part.
func (*Service) Name() string { return "shares" }

// refusedWhy is the reason of the operations refused while a share is
// attached (the specification answers 409 until moves carry shares).
const refusedWhy = "refused while a share is attached: detach the shares first"

// Answers implements part.Part.
func (*Service) Answers() part.Answers {
	return part.Answers{
		part.Apply:            {Do: part.Act, Why: "the instance's mapped shares are its spec's; a spec naming a registered share attaches it (Complete, Committed)"},
		part.Start:            {Do: part.Act, Why: "mounts the NFS shares on the host before the boot (a failed mount: ERROR until a hard reboot); the mappings become active"},
		part.Stop:             {Do: part.Act, Why: "the mappings become inactive, their host mounts released"},
		part.RebootSoft:       {Do: part.Nothing, Why: "the domain keeps running: the mappings stay active"},
		part.RebootHard:       {Do: part.Act, Why: "power-off releases the host mounts, the start mounts again (retrying a failed mount)"},
		part.Delete:           {Do: part.Act, Why: "each mapping is detached: host mount released, share unlocked, mapping removed"},
		part.ForceDelete:      {Do: part.Act, Why: "the mappings go and the shares are unlocked (AfterDelete); the dead host's NFS mounts are its share reconciler's"},
		part.Adopt:            {Do: part.Act, Why: "the mappings move to the adopting host, inactive (the domain does not run here yet)"},
		part.Shelve:           {Do: part.Act, Why: "the mappings stop: inactive, host mounts released; they stay, and unshelve mounts again"},
		part.Unshelve:         {Do: part.Act, Why: "the domain is defined with the mapped shares; its start mounts them and the mappings become active"},
		part.Rescue:           {Do: part.Act, Why: "the rescue domain has no shares: the mappings go inactive, host mounts released"},
		part.Unrescue:         {Do: part.Act, Why: "the instance's start mounts the shares again and the mappings become active"},
		part.Resize:           {Do: part.Refuse, Why: "resize is " + refusedWhy},
		part.Rebuild:          {Do: part.Refuse, Why: "rebuild is " + refusedWhy},
		part.Snapshot:         {Do: part.Nothing, Why: "a snapshot copies the root disk; shares are not in it"},
		part.MigrateCold:      {Do: part.Refuse, Why: "a move is " + refusedWhy + " (the specification: moves with shares are refused until the host-side attach is generalised)"},
		part.MigrateLive:      {Do: part.Refuse, Why: "a live migration is " + refusedWhy + " (the specification: moves with shares are refused until the host-side attach is generalised)"},
		part.ConfirmMigration: {Do: part.Nothing, Why: "no instance with a share moves"},
		part.RevertMigration:  {Do: part.Nothing, Why: "no instance with a share moves"},
		part.Evacuate:         {Do: part.Act, Why: "the mappings move to the new host, inactive, as for an adopt (Committed); the rebuilt domain is defined with them and its start mounts them there"},
	}
}

// Check implements part.Part: an apply of a spec with shares is refused
// on a host that cannot give instances shares; resize and rebuild are
// refused while the instance has a share mapping, naming the shares.
func (s *Service) Check(ctx context.Context, op part.Op, in *part.Instance) error {
	if (op == part.Apply || op == part.Evacuate) && len(in.Spec.Shares) > 0 {
		return s.checkSupport(ctx) // an evacuation's new host must be able to mount them
	}
	if s.Answers()[op].Do != part.Refuse || in.Spec.UUID == "" {
		return nil
	}
	ms, err := mappings(ctx, s.st, in.Spec.UUID)
	if err != nil || len(ms) == 0 {
		return err
	}
	ids := make([]string, 0, len(ms))
	for _, m := range ms {
		ids = append(ids, m.ShareID)
	}
	return &part.RefusedError{Part: s.Name(), Op: op, Instance: in.Spec.Name,
		Reason: fmt.Sprintf("shares are attached (%s); %s is %s", strings.Join(ids, ", "), op, refusedWhy)}
}

// Prepare implements part.Part: shelve and rescue stop the mappings (the
// instance's domain is gone or has no shares); the other operations it
// acts on do their work in the other phases.
func (s *Service) Prepare(ctx context.Context, op part.Op, in *part.Instance, r *revert.Reverter, _ *part.Contribution) error {
	switch op {
	case part.Shelve, part.Rescue:
		return s.stopMappings(ctx, in.Spec.UUID, r)
	}
	return nil
}

// Devices implements part.Part: the shares are listed with the instance's
// own (its spec's shares, the mappings' status in `share list`).
func (*Service) Devices(*part.Instance) ([]part.Device, error) { return nil, nil }

// AfterStart implements part.Part: the mappings of the started instance
// become active.
func (s *Service) AfterStart(ctx context.Context, in *part.Instance) error {
	s.started(ctx, in.Spec.UUID)
	return nil
}

// AfterStop implements part.Part: see Stopped.
func (s *Service) AfterStop(ctx context.Context, in *part.Instance) error {
	s.Stopped(ctx, in.Spec.UUID)
	return nil
}

// AfterDelete implements part.Part: see Deleted.
func (s *Service) AfterDelete(ctx context.Context, in *part.Instance) error {
	s.Deleted(ctx, in.Spec.UUID)
	return nil
}

// Complete implements part.Completer: the shares of an applied spec (see
// specShares); the attaches it begins are undone on r when the apply
// fails, and finished by Committed when it stands.
func (s *Service) Complete(ctx context.Context, op part.Op, in *part.Instance, r *revert.Reverter) error {
	a := shareApply{UUID: in.Spec.UUID, Name: in.Spec.Name, Project: in.Spec.ProjectID, Shares: in.Spec.Shares}
	old, err := s.st.Instance(ctx, in.Spec.Name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		a.New = true
	case err != nil:
		return err
	default:
		spec, err := decodeSpec(old)
		if err != nil {
			return err
		}
		a.Old = spec.Shares
	}
	a.Hypervisor, _ = s.inst.Capabilities()
	shares, err := s.specShares(ctx, a, r)
	if err != nil {
		return err
	}
	in.Spec.Shares = shares
	return nil
}

// Committed implements part.Committer: an apply's attaches are finished
// (the mappings inactive); a force-delete names the NFS mounts left on
// the instance's dead host (its mappings went in AfterDelete); an adopt
// moves the mappings to this host.
func (s *Service) Committed(ctx context.Context, op part.Op, in *part.Instance) []string {
	switch op {
	case part.Apply:
		s.finishSpecAttaches(ctx, in.Spec.UUID)
	case part.ForceDelete:
		// AfterDelete dropped the mappings (the core runs it for the
		// parts acting on a force delete); what stays is the dead host's.
		return []string{fmt.Sprintf("NFS share mounts of %s on host %s (its share reconciler unmounts them if it comes back)", in.Spec.Name, in.Host)}
	case part.Adopt, part.Evacuate:
		s.adopted(ctx, in.Spec.UUID, in.Host)
	}
	return nil
}

// BeforeStart implements part.Starter: see prepareStart.
func (s *Service) BeforeStart(ctx context.Context, in *part.Instance, r *revert.Reverter) error {
	return s.prepareStart(ctx, in.Spec.UUID, r)
}

// shareApply is what an apply tells the part about the instance it
// applies.
type shareApply struct {
	UUID, Name, Project string
	// Shares are the shares of the spec being applied.
	Shares []model.Share
	// Old are the shares of the stored spec (nil for a new instance).
	Old []model.Share
	// New: the instance does not exist yet.
	New bool
	// Hypervisor: the daemon runs with one (a new instance's domain is
	// defined shut off); without one an instance has no domain state.
	Hypervisor bool
}

// specShares decides the shares of an instance on every apply: they are
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
//     steps as `hostctl share attach` (checkAttach, beginAttach on r, and
//     finishAttach once the apply stands, see Committed), with
//     the attach's rules: the instance SHUTOFF (or new, with a
//     hypervisor), the share the instance's project's, its tag unused.
//
// Everything else is refused before anything changes, with the field:
// an unknown share_id (register the share first), a source written in a
// spec (a share's directory is the registry's, inside the share root), a
// share line from before the registry (not in it).
func (s *Service) specShares(ctx context.Context, a shareApply, r *revert.Reverter) ([]model.Share, error) {
	if a.UUID == "" {
		return a.Shares, nil
	}
	ms, err := mappings(ctx, s.st, a.UUID)
	if err != nil {
		return nil, err
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
			return nil, err
		case stored:
			continue // in the stored spec without a mapping: an attach undone
		}
		if x.Source != "" {
			continue // refused above
		}
		requests = append(requests, shareTag{sh: sh, tag: x.EffectiveTag()})
	}
	if len(errs) > 0 {
		return nil, &model.SpecError{Errors: errs}
	}
	if len(requests) > 0 {
		tgt := attachTarget{UUID: a.UUID, Name: a.Name, Host: s.host, Project: a.Project}
		state := "shutoff" // a new instance's domain is defined shut off
		if !a.New {
			rec, err := s.st.Instance(ctx, a.Name)
			if err != nil {
				return nil, err
			}
			if state, err = s.stateOf(ctx, rec); err != nil {
				return nil, err
			}
			tgt.Host = rec.Host
		} else if !a.Hypervisor {
			state = ""
		}
		if tgt.Host == "" {
			tgt.Host = s.host
		}
		if err := attachable(a.Name, state); err != nil {
			return nil, fmt.Errorf("attach share %s: %w", requests[0].sh.ID, err)
		}
		if err := s.checkSupport(ctx); err != nil {
			return nil, fmt.Errorf("attach share %s to %s: %w", requests[0].sh.ID, a.Name, err)
		}
		for _, q := range requests {
			if err := tgt.checkProject(q.sh); err != nil {
				return nil, err
			}
			// The spec's own tags are unique (model.Validate): the
			// mappings' are what an attached share must not reuse.
			if err := s.checkAttach(tgt, q.sh, q.tag, ms, nil); err != nil {
				return nil, err
			}
		}
		if err := s.attachFromSpec(ctx, r, tgt, requests); err != nil {
			return nil, err
		}
		if ms, err = mappings(ctx, s.st, a.UUID); err != nil {
			return nil, err
		}
	}
	var out []model.Share
	for _, m := range ms {
		if m.Status != types.ShareDetaching {
			out = append(out, model.Share{ShareID: m.ShareID, Tag: m.Tag, Source: s.sourceOf(m)})
		}
	}
	return out, nil
}

// shareTag is a share a spec attaches, and its tag.
type shareTag struct {
	sh  Share
	tag string
}

// attachFromSpec begins the attach of each share a spec names that the
// instance does not have yet (mapping attaching, share locked; r undoes
// both when the apply fails); finishSpecAttaches finishes them once it
// stands. Until then the reconciler leaves the instance's mappings alone
// (the instance may not be stored yet).
func (s *Service) attachFromSpec(ctx context.Context, r *revert.Reverter, tgt attachTarget, qs []shareTag) error {
	s.applyingMu.Lock()
	if s.applying == nil {
		s.applying = map[string]int{}
	}
	s.applying[tgt.UUID]++
	s.applyingMu.Unlock()
	// First on r, so undone last: the reconciler keeps off until the
	// attaches are undone.
	r.Add("let the share reconciler see the mappings of "+tgt.Name, func(context.Context) error {
		s.unmarkApplying(tgt.UUID)
		return nil
	})
	for _, q := range qs {
		m := tgt.mapping(q.sh, q.tag)
		if err := s.beginAttach(ctx, r, &m); err != nil {
			return err
		}
		s.applyingMu.Lock()
		if s.begun == nil {
			s.begun = map[string][]Mapping{}
		}
		s.begun[tgt.UUID] = append(s.begun[tgt.UUID], m)
		s.applyingMu.Unlock()
	}
	return nil
}

// unmarkApplying ends an apply's attaches (finished or undone).
func (s *Service) unmarkApplying(uuid string) {
	s.applyingMu.Lock()
	defer s.applyingMu.Unlock()
	if s.applying[uuid]--; s.applying[uuid] <= 0 {
		delete(s.applying, uuid)
		delete(s.begun, uuid)
	}
}

// finishSpecAttaches finishes the attaches an apply of instance uuid
// began, now that the apply stands: the instance is redefined with the
// shares, their mappings become inactive (what is left, a failed write,
// the reconciler completes).
func (s *Service) finishSpecAttaches(ctx context.Context, uuid string) {
	s.applyingMu.Lock()
	begun := s.begun[uuid]
	delete(s.begun, uuid)
	_, marked := s.applying[uuid]
	s.applyingMu.Unlock()
	if !marked {
		return
	}
	defer s.unmarkApplying(uuid)
	// The apply is over: its outcome is recorded even if its caller went
	// away meanwhile.
	ctx = context.WithoutCancel(ctx)
	for _, m := range begun {
		if err := s.finishAttach(ctx, &m); err != nil {
			s.log.Warn("share attached by a spec left attaching (the reconciler completes it)", "share", m.ShareID, "instance", m.InstanceName, "err", err)
		}
	}
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

// prepareStart mounts the NFS shares of an instance about to start (once
// per host: a share mounted for another instance is reused); r releases
// them when the start fails. A share whose mount fails moves to error and
// the start is refused with part.ErrMountFailed: the core marks the
// instance ERROR, and only a hard reboot retries the mount. A mapping
// still attaching or detaching refuses the start.
func (s *Service) prepareStart(ctx context.Context, uuid string, r *revert.Reverter) error {
	s.seedCounts(ctx)
	ms, err := mappings(ctx, s.st, uuid)
	if err != nil {
		return err
	}
	for _, m := range ms {
		switch m.Status {
		case types.ShareAttaching, types.ShareDetaching:
			return fmt.Errorf("%w: %v is %s; start the instance once it is done (the reconciler completes it)", part.ErrState, m, m.Status)
		case types.ShareError:
			// Only inactive mappings start. One in error is brought back
			// first, as the reconciler does: its host mount released
			// (the unmount that failed retried); if that fails again,
			// the start is refused naming it.
			if err := s.recoverError(ctx, &m); err != nil {
				return fmt.Errorf("%w: %v is in error and could not be made inactive again: %w; a start needs every share inactive (the reconciler retries; or hostctl share detach)", part.ErrState, m, err)
			}
		case types.ShareInactive, types.ShareActive:
		default:
			return fmt.Errorf("%w: %v is %s; a start needs every share inactive", part.ErrState, m, m.Status)
		}
		if !hostMounted(m.Proto) {
			continue
		}
		if err := s.mounts.acquire(ctx, m.ShareID, m.Proto, m.Export, m.Instance); err != nil {
			reason := err.Error()
			if terr := transition(ctx, s.st, &m, types.ShareError, reason, types.ShareInactive, types.ShareActive, types.ShareError); terr != nil {
				s.log.Warn("could not mark the share mapping error", "share", m.ShareID, "err", terr)
			}
			s.instanceUpdate(ctx, uuid, m.InstanceName)
			// part.ErrMountFailed: the core marks the instance ERROR
			// with this text (it names the share, never the export).
			return &part.MountError{Share: m.ShareID, Instance: m.InstanceName, Err: err}
		}
		r.Add("release the host mount of share "+m.ShareID, func(ctx context.Context) error {
			return s.mounts.Release(context.WithoutCancel(ctx), m.ShareID, m.Instance)
		})
	}
	return nil
}

// started is told that the instance's domain booted: every mapping
// becomes active.
func (s *Service) started(ctx context.Context, uuid string) {
	ms, err := mappings(ctx, s.st, uuid)
	if err != nil {
		s.log.Warn("share mappings after start", "instance", uuid, "err", err)
		return
	}
	for _, m := range ms {
		if m.Status == types.ShareActive {
			continue
		}
		if err := transition(ctx, s.st, &m, types.ShareActive, "", types.ShareInactive, types.ShareError); err != nil {
			s.log.Warn("share mapping not marked active", "share", m.ShareID, "instance", m.InstanceName, "err", err)
		}
	}
	if len(ms) > 0 {
		s.instanceUpdate(ctx, uuid, ms[0].InstanceName)
	}
}

// Stopped is told that an instance's domain stopped: its active mappings
// become inactive and their host mounts are released (unmounted when no
// other instance on the host uses them). A failed unmount moves the
// mapping to error (the reconciler retries the unmount).
func (s *Service) Stopped(ctx context.Context, uuid string) {
	s.seedCounts(ctx)
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
		if hostMounted(m.Proto) {
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
	if hostMounted(m.Proto) {
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
	s.seedCounts(ctx)
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

// stopMappings stops the mappings of an instance whose domain is gone or
// runs without its shares (shelve, rescue): as after a stop, each one
// active becomes inactive with its host mount released, and one left in
// error by a failed unmount has the unmount retried (the reconciler
// retries what fails again). r makes the active ones active again, their
// mounts taken, when the operation fails (rescue starts the instance's
// own domain again).
func (s *Service) stopMappings(ctx context.Context, uuid string, r *revert.Reverter) error {
	s.seedCounts(ctx)
	ms, err := mappings(ctx, s.st, uuid)
	if err != nil {
		return err
	}
	for _, m := range ms {
		switch m.Status {
		case types.ShareActive:
			if hostMounted(m.Proto) {
				if err := s.mounts.Release(ctx, m.ShareID, uuid); err != nil {
					return fmt.Errorf("share %s: release the host mount: %w", m.ShareID, err)
				}
			}
			if err := transition(ctx, s.st, &m, types.ShareInactive, "", types.ShareActive); err != nil {
				return err
			}
			r.Add("make the mapping of share "+m.ShareID+" active again", func(ctx context.Context) error {
				ctx = context.WithoutCancel(ctx)
				if hostMounted(m.Proto) {
					if err := s.mounts.acquire(ctx, m.ShareID, m.Proto, m.Export, m.Instance); err != nil {
						return err
					}
				}
				return transition(ctx, s.st, &m, types.ShareActive, "", types.ShareInactive)
			})
		case types.ShareError:
			if err := s.recoverError(ctx, &m); err != nil {
				s.log.Warn("share mapping left in error (the reconciler retries its unmount)", "share", m.ShareID, "instance", m.InstanceName, "err", err)
			}
		}
	}
	if len(ms) > 0 {
		s.instanceUpdate(ctx, uuid, ms[0].InstanceName)
	}
	return nil
}

// adopted moves the mappings of an instance host adopted to that host:
// inactive (the domain does not run there yet; the mounts on the old host
// are its share reconciler's). What fails the reconciler does later.
func (s *Service) adopted(ctx context.Context, uuid, host string) {
	ms, err := mappings(ctx, s.st, uuid)
	if err != nil {
		s.log.Warn("share mappings of an adopted instance left for the reconciler", "instance", uuid, "err", err)
		return
	}
	for _, m := range ms {
		if host != "" && m.Host != host {
			if err := rehost(ctx, s.st, &m, host); err != nil {
				s.log.Warn("share mapping of an adopted instance left for the reconciler", "share", m.ShareID, "instance", m.InstanceName, "err", err)
				continue
			}
		}
		if m.Status == types.ShareActive {
			if err := transition(ctx, s.st, &m, types.ShareInactive, "", types.ShareActive); err != nil {
				s.log.Warn("share mapping of an adopted instance left for the reconciler", "share", m.ShareID, "instance", m.InstanceName, "err", err)
			}
		}
	}
}

// seedCounts loads the host mounts' reference counts from this host's
// active NFS mappings, once, before a phase takes or releases a mount:
// at start-up the core may tell the part of a stop (its reconciler found
// a guest powered off while hostctl was down) before the share
// reconciler's first pass rebuilt the counts, and a release without them
// would unmount a share other instances on the host still use. A failure
// is tried again on the next phase.
func (s *Service) seedCounts(ctx context.Context) {
	s.seedMu.Lock()
	defer s.seedMu.Unlock()
	if s.seeded {
		return
	}
	all, err := mappings(ctx, s.st, "")
	if err != nil {
		s.log.Warn("share mount counts not loaded yet", "err", err)
		return
	}
	users := map[string][]string{}
	for _, m := range all {
		if m.Status == types.ShareActive && hostMounted(m.Proto) && (m.Host == "" || s.host == "" || m.Host == s.host) {
			users[m.ShareID] = append(users[m.ShareID], m.Instance)
		}
	}
	if _, err := s.mounts.Rebuild(users, false); err != nil {
		s.log.Warn("share mount counts not loaded yet", "err", err)
		return
	}
	s.seeded = true
}
