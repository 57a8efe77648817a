package shares

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/events"
	"github.com/vmeta/vmeta/hostctl/internal/keylock"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/shares/hostdir"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/uuid"
)

// Stream is the event stream of share attachments.
const Stream = "shares"

// Event types.
const (
	EventAttached = "share.attached"
	EventDetached = "share.detached"
)

// DefaultReconcileInterval is how often the reconciler looks for leaked
// mappings and mounts.
const DefaultReconcileInterval = time.Minute

// now is the clock of the records' updated_at (a variable for tests).
var now = func() time.Time { return time.Now().UTC() }

// Store is what the service needs from the store: its records, and the
// instance records (to find a server by UUID and to tell a deleted
// instance).
type Store interface {
	store.Records
	Instance(ctx context.Context, name string) (store.Instance, error)
	Instances(ctx context.Context) ([]store.Instance, error)
}

// Instances is what the service needs from the controller core (its
// methods in hostctl/controller: core_parts.go, core_ops.go): an
// instance's domain state, applying its spec again (which merges the
// mapped shares through the part's Complete), and whether instances have
// domains here at all.
type Instances interface {
	// DomainState is the instance's state as `instance show` gives it:
	// libvirt's ("running", "shutoff", ...), StateError, StateMissing,
	// StateUnknown, a shelve's or rescue's; "" without a hypervisor.
	DomainState(ctx context.Context, name string) (string, error)
	// Reapply applies in again.
	Reapply(ctx context.Context, in *model.Instance) error
	// Capabilities reports whether instances have domains on this host
	// (hypervisor false with --virt none); records is not the service's.
	Capabilities() (hypervisor, records bool)
}

// The states of DomainState that are the core's, not libvirt's (the
// controller's StateError, StateMissing, StateUnknown).
const (
	// StateError: a start failed on a share mount (hard reboot needed).
	StateError = "error"
	// StateMissing: libvirt has no domain for the instance.
	StateMissing = "missing"
	// StateUnknown: libvirtd could not be asked.
	StateUnknown = "unknown"
)

// Options configure a Service.
type Options struct {
	// Host is this host's name (the owner of the mappings of its
	// instances); "" when hosts are not tracked.
	Host string
	// ShareRoot is the directory local exports must be in; NFS shares
	// are mounted under ShareRoot/.nfs.
	ShareRoot string
	// Runner runs mount and umount; ExecRunner when nil.
	Runner Runner
	// Events receives share.attached and share.detached (nil: none).
	Events *events.Log
	Logger *slog.Logger
	// ReconcileInterval: DefaultReconcileInterval when 0, never when
	// negative.
	ReconcileInterval time.Duration
	// MountInfo is the mount table read; /proc/self/mountinfo when empty.
	MountInfo string
	// Support is what this host's libvirt offers shares (virt.Conn's
	// ShareSupport for the domains' type and machine); nil without a
	// hypervisor.
	Support func(ctx context.Context) (virt.ShareSupport, error)
	// CephX is this host's CephX client for CephFS shares (nil: CephFS
	// shares cannot be mapped here).
	CephX *CephX
	// InstanceUpdateEvents emits an instance.update event (stream
	// "instances") with the instance's mappings whenever one of them
	// changes (the specification's include_share_mapping; off by default).
	InstanceUpdateEvents bool
}

// Service is the share registry and the share mappings of one host.
type Service struct {
	st       Store
	inst     Instances
	support  func(ctx context.Context) (virt.ShareSupport, error)
	host     string
	root     hostdir.Root
	mounts   *Mounts
	cephx    *CephX
	events   *events.Log
	log      *slog.Logger
	interval time.Duration
	instEvts bool

	locks keylock.Map

	// applying counts, per instance UUID, the applies of a spec that
	// attach shares (attachFromSpec) under way: the reconciler leaves
	// their mappings alone meanwhile.
	applyingMu sync.Mutex
	applying   map[string]int
	begun      map[string][]Mapping // their mappings, to finish once the apply stands

	seedMu sync.Mutex
	seeded bool // the mount counts were loaded before a phase (seedCounts)

	reconcileMu sync.Mutex
	rebuilt     bool // the first Reconcile rebuilt the mount counts

	stop func()
	done chan struct{}
	once sync.Once
}

// New returns the service. Call Start to run the reconciler.
func New(st Store, inst Instances, opts Options) *Service {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Service{st: st, inst: inst, support: opts.Support, host: opts.Host, root: hostdir.Root{Dir: opts.ShareRoot}, events: opts.Events, log: log, interval: opts.ReconcileInterval,
		instEvts: opts.InstanceUpdateEvents}
	s.mounts = NewMounts(filepath.Join(opts.ShareRoot, NFSMountDir), opts.Runner, log)
	s.cephx = opts.CephX
	s.mounts.ceph = opts.CephX
	if s.cephx != nil {
		s.cephx.users = s.mounts.Users
	}
	if opts.MountInfo != "" {
		s.mounts.mountinfo = opts.MountInfo
	}
	if s.interval == 0 {
		s.interval = DefaultReconcileInterval
	}
	return s
}

// NFSMountDir is the directory under the share root where NFS shares are
// mounted (one directory per share ID).
const NFSMountDir = ".nfs"

// Mounts returns the host mounts of NFS shares.
func (s *Service) Mounts() *Mounts { return s.mounts }

// ---- the registry ----

func isAdmin(p types.Principal) bool { return p.Role == types.RoleAdmin }

func (s *Service) visible(p types.Principal, sh Share) error {
	if isAdmin(p) || (p.Role == types.RoleMember && p.Project != "" && p.Project == sh.Project) {
		return nil
	}
	return fmt.Errorf("share %s: %w: it belongs to another project", sh.ID, ErrForbidden)
}

// CreateShare adds a share to the registry (administrators only).
func (s *Service) CreateShare(ctx context.Context, p types.Principal, req types.ShareCreateRequest) (types.Share, error) {
	if !isAdmin(p) {
		return types.Share{}, fmt.Errorf("create share: %w: only administrators create shares", ErrForbidden)
	}
	sh, err := s.checkCreate(req)
	if err == nil && sh.Proto == ProtoCephFS && s.cephx != nil {
		exp, _ := ParseCephFSExport(sh.Export)
		err = s.cephx.CheckFS(ctx, exp.FS)
	}
	if err != nil {
		return types.Share{}, fmt.Errorf("create share: %w", err)
	}
	if sh.ID == "" {
		sh.ID = newUUID()
	}
	sh.Created = now()
	if err := putShare(ctx, s.st, &sh); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return types.Share{}, fmt.Errorf("create share: %w: a share with id %s exists", store.ErrConflict, sh.ID)
		}
		return types.Share{}, fmt.Errorf("create share: %w", err)
	}
	s.log.Info("share created", "share", sh.ID, "project", sh.Project, "proto", sh.Proto)
	return sh.View(true), nil
}

// ListShares lists the shares the caller sees.
func (s *Service) ListShares(ctx context.Context, p types.Principal) ([]types.Share, error) {
	all, err := listShares(ctx, s.st)
	if err != nil {
		return nil, err
	}
	out := []types.Share{}
	for _, sh := range all {
		if s.visible(p, sh) == nil {
			out = append(out, sh.View(isAdmin(p)))
		}
	}
	return out, nil
}

// GetShare returns one share.
func (s *Service) GetShare(ctx context.Context, p types.Principal, id string) (types.Share, error) {
	id, err := CheckUUID("share_id", id)
	if err != nil {
		return types.Share{}, err
	}
	sh, err := loadShare(ctx, s.st, id)
	if err != nil {
		return types.Share{}, err
	}
	if err := s.visible(p, sh); err != nil {
		return types.Share{}, err
	}
	return sh.View(isAdmin(p)), nil
}

// DeleteShare removes a share from the registry (administrators only).
// A share mapped to any instance, on any host, is locked: the delete is
// refused with ErrConflict naming the instances. The check and the delete
// are one versioned write, so an attach racing the delete either locks the
// share first (and the delete is refused) or finds it gone.
func (s *Service) DeleteShare(ctx context.Context, p types.Principal, id string) error {
	if !isAdmin(p) {
		return fmt.Errorf("delete share: %w: only administrators delete shares", ErrForbidden)
	}
	id, err := CheckUUID("share_id", id)
	if err != nil {
		return err
	}
	// Locked (or changed) between the read and the delete: look again.
	return store.RetryConflicts(ctx, "delete share "+id, func() error {
		sh, err := loadShare(ctx, s.st, id)
		if err != nil {
			return store.Final(fmt.Errorf("delete %w", err))
		}
		if len(sh.Holders) > 0 {
			var names []string
			for _, h := range sh.Holders {
				names = append(names, fmt.Sprintf("%s (%s, host %s)", h.Name, h.Instance, orDash(h.Host)))
			}
			return store.Final(fmt.Errorf("delete share %s: %w: it is locked: attached to %s; detach it first", id, store.ErrConflict, strings.Join(names, ", ")))
		}
		err = s.st.DeleteRecord(ctx, shareKey(id), sh.version)
		switch {
		case err == nil:
			s.log.Info("share deleted", "share", id)
			return nil
		case errors.Is(err, store.ErrConflict):
			return err
		case errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("delete share %s: %w", id, store.ErrNotFound)
		default:
			return fmt.Errorf("delete share %s: %w", id, err)
		}
	})
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ---- servers ----

// server finds the instance a server id names (its UUID, or its name),
// as the caller may see it: another project's is not found.
func (s *Service) server(ctx context.Context, p types.Principal, id string) (store.Instance, error) {
	var rec store.Instance
	var err error
	if uuid.Valid(id) {
		err = store.ErrNotFound
		recs, lerr := s.st.Instances(ctx)
		if lerr != nil {
			return store.Instance{}, fmt.Errorf("server %s: %w", id, lerr)
		}
		for _, r := range recs {
			if strings.EqualFold(r.UUID, id) {
				rec, err = r, nil
				break
			}
		}
	} else {
		rec, err = s.st.Instance(ctx, id)
	}
	if err == nil && !isAdmin(p) && !(p.Role == types.RoleMember && p.Project != "" && p.Project == rec.ProjectID) {
		err = store.ErrNotFound
	}
	if errors.Is(err, store.ErrNotFound) {
		return store.Instance{}, fmt.Errorf("server %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Instance{}, fmt.Errorf("server %s: %w", id, err)
	}
	return rec, nil
}

func (s *Service) owns(rec store.Instance) bool {
	return rec.Host == "" || s.host == "" || rec.Host == s.host
}

// ServerShares lists the shares attached to a server.
func (s *Service) ServerShares(ctx context.Context, p types.Principal, server string) ([]types.ShareMapping, error) {
	rec, err := s.server(ctx, p, server)
	if err != nil {
		return nil, err
	}
	ms, err := mappings(ctx, s.st, rec.UUID)
	if err != nil {
		return nil, err
	}
	out := []types.ShareMapping{}
	for _, m := range ms {
		out = append(out, m.View(isAdmin(p)))
	}
	return out, nil
}

// ServerShare shows one share attached to a server.
func (s *Service) ServerShare(ctx context.Context, p types.Principal, server, shareID string) (types.ShareMapping, error) {
	rec, err := s.server(ctx, p, server)
	if err != nil {
		return types.ShareMapping{}, err
	}
	id, err := CheckUUID("share_id", shareID)
	if err != nil {
		return types.ShareMapping{}, err
	}
	m, err := loadMapping(ctx, s.st, rec.UUID, id)
	if errors.Is(err, store.ErrNotFound) {
		return types.ShareMapping{}, fmt.Errorf("share %s is not attached to server %s: %w", id, rec.Name, store.ErrNotFound)
	}
	if err != nil {
		return types.ShareMapping{}, err
	}
	return m.View(isAdmin(p)), nil
}

// stateOf returns the instance's domain state.
func (s *Service) stateOf(ctx context.Context, rec store.Instance) (string, error) {
	return s.inst.DomainState(ctx, rec.Name)
}

// shutOff reports whether a state allows a detach (the specification:
// SHUTOFF or ERROR): shut off, in ERROR (the domain is not running: a
// start failed on a share mount), or no hypervisor at all (nothing runs,
// and a mapping made before must be removable).
func shutOff(state string) bool {
	return state == "shutoff" || state == StateError || state == ""
}

// attachable refuses, with ErrState naming the state, an attach to an
// instance that is not SHUTOFF: the specification attaches only to
// SHUTOFF instances, so not in ERROR (a hard reboot or a detach first),
// and not without a hypervisor (--virt none), where an instance has no
// domain state at all.
func attachable(name, state string) error {
	switch state {
	case "shutoff":
		return nil
	case "":
		return fmt.Errorf("%w: %s has no hypervisor state (hostctl serve runs with --virt none): shares are attached to SHUTOFF instances only, which needs a hypervisor", part.ErrState, name)
	case StateError:
		return fmt.Errorf("%w: %s is in ERROR; shares are attached to SHUTOFF instances only (hard reboot it, or stop it, first)", part.ErrState, name)
	}
	return fmt.Errorf("%w: the instance is %s; shares are attached to SHUTOFF instances (stop it first, or --live to hot-plug it)", part.ErrState, state)
}

// AttachShare attaches a share to a server that is shut off: the mapping
// is created (attaching), the share locked for the instance (access
// granted), the instance's domain redefined with the share's virtiofs
// filesystem and its metadata republished, and the mapping moved to
// inactive. A failure at any step undoes the steps before it.
func (s *Service) AttachShare(ctx context.Context, p types.Principal, server string, req types.ServerShareAttach) (_ types.ShareMapping, err error) {
	id, err := CheckUUID("share.share_id", req.ShareID)
	if err != nil {
		return types.ShareMapping{}, err
	}
	tag := req.Tag
	if tag == "" {
		tag = id
	}
	if err := CheckTag(tag); err != nil {
		return types.ShareMapping{}, err
	}
	rec, err := s.server(ctx, p, server)
	if err != nil {
		return types.ShareMapping{}, err
	}
	if !s.owns(rec) {
		return types.ShareMapping{}, fmt.Errorf("attach share to %s: %w: %s lives on %s (this is %s)", rec.Name, ErrOtherHost, rec.Name, rec.Host, s.host)
	}
	defer s.locks.Lock(rec.UUID)()
	sh, err := loadShare(ctx, s.st, id)
	if err != nil {
		return types.ShareMapping{}, err
	}
	if err := s.visible(p, sh); err != nil {
		return types.ShareMapping{}, err
	}
	tgt := attachTarget{UUID: rec.UUID, Name: rec.Name, Host: rec.Host, Project: rec.ProjectID}
	if err := tgt.checkProject(sh); err != nil {
		return types.ShareMapping{}, err
	}
	state, err := s.stateOf(ctx, rec)
	if err != nil {
		return types.ShareMapping{}, err
	}
	live := req.Live && state != "shutoff"
	switch {
	case state == "" || state == StateError:
		if err := attachable(rec.Name, state); err != nil {
			return types.ShareMapping{}, fmt.Errorf("attach share %s to %s: %w", id, rec.Name, err)
		}
	case live && state != "running":
		return types.ShareMapping{}, fmt.Errorf("attach share %s to %s: %w: the instance is %s; a live attach needs it running", id, rec.Name, part.ErrState, orDash(state))
	case !live:
		if err := attachable(rec.Name, state); err != nil {
			return types.ShareMapping{}, fmt.Errorf("attach share %s to %s: %w", id, rec.Name, err)
		}
	}
	lc, _ := s.inst.(LiveCore)
	if live && lc == nil {
		return types.ShareMapping{}, fmt.Errorf("attach share %s to %s: %w: live attach is not available here", id, rec.Name, part.ErrState)
	}
	if live {
		if err := checkLive(ctx, lc, rec.Name); err != nil {
			return types.ShareMapping{}, err
		}
	}
	if err := s.checkSupport(ctx); err != nil {
		return types.ShareMapping{}, fmt.Errorf("attach share %s to %s: %w", id, rec.Name, err)
	}
	in, err := decodeSpec(rec)
	if err != nil {
		return types.ShareMapping{}, err
	}
	existing, err := mappings(ctx, s.st, rec.UUID)
	if err != nil {
		return types.ShareMapping{}, err
	}
	if err := s.checkAttach(tgt, sh, tag, existing, in.Shares); err != nil {
		return types.ShareMapping{}, err
	}

	r := revert.New(s.log, "attach share "+id+" to "+rec.Name)
	defer r.Fail(&err)
	m := tgt.mapping(sh, tag)
	if err := s.beginAttach(ctx, r, &m); err != nil {
		return types.ShareMapping{}, err
	}
	if live {
		return s.attachLive(ctx, r, lc, m, p)
	}
	if err := s.inst.Reapply(ctx, in); err != nil {
		return types.ShareMapping{}, err
	}
	// Undone after the mapping is gone, so that the apply drops the share.
	mm := m
	r.Add("redefine the instance without the share", func(ctx context.Context) error {
		if err := s.dropMapping(ctx, mm); err != nil {
			return err
		}
		err := s.reapply(ctx, rec.Name)
		return err
	})
	if err := s.finishAttach(ctx, &m); err != nil {
		return types.ShareMapping{}, err
	}
	r.Success()
	return m.View(isAdmin(p)), nil
}

// checkSupport refuses, with ErrState, shares on a host whose libvirt
// offers no virtiofs driver or cannot share guest memory (Nova's
// COMPUTE_STORAGE_VIRTIO_FS and COMPUTE_MEM_BACKING_FILE traits): an
// instance whose memory cannot be shared cannot have a share. Without a
// hypervisor there is nothing to check. Asked before an attach, or an
// apply of a spec with shares, changes anything.
func (s *Service) checkSupport(ctx context.Context) error {
	if s.support == nil {
		return nil
	}
	sup, err := s.support(ctx)
	if err != nil {
		return err
	}
	if err := sup.Check(); err != nil {
		return fmt.Errorf("%w: %w", part.ErrState, err)
	}
	return nil
}

// attachTarget is the instance a share is attached to.
type attachTarget struct{ UUID, Name, Host, Project string }

// mapping is the new mapping (attaching) of sh to t with tag.
func (t attachTarget) mapping(sh Share, tag string) Mapping {
	return Mapping{Instance: t.UUID, InstanceName: t.Name, Host: t.Host, Project: t.Project, ShareID: sh.ID, Tag: tag,
		Status: types.ShareAttaching, Proto: sh.Proto, Export: sh.Export, Updated: now()}
}

// checkProject refuses a share of another project than the instance's.
func (t attachTarget) checkProject(sh Share) error {
	if t.Project != "" && sh.Project != t.Project {
		return fmt.Errorf("share %s: %w: it belongs to project %s, server %s to project %s", sh.ID, ErrForbidden, sh.Project, t.Name, t.Project)
	}
	return nil
}

// checkAttach is what an attach checks of the share against the instance
// (an attach request and an apply of a spec naming the share alike):
// neither the share nor its tag is attached already (existing: the
// instance's mappings; specShares: the shares of its spec), and its
// directory is there: a local export still inside the share root, the
// mount point of an NFS one made.
func (s *Service) checkAttach(t attachTarget, sh Share, tag string, existing []Mapping, specShares []model.Share) error {
	id := sh.ID
	for _, m := range existing {
		switch {
		case m.ShareID == id:
			return fmt.Errorf("attach share %s to %s: %w: it is already attached (status %s); a share is attached at most once to an instance", id, t.Name, store.ErrConflict, m.Status)
		case m.Tag == tag:
			return fmt.Errorf("attach share %s to %s: %w: share.tag %q is already used on the instance by share %s", id, t.Name, store.ErrConflict, tag, m.ShareID)
		}
	}
	for _, x := range specShares {
		if x.EffectiveTag() == tag && !strings.EqualFold(x.ShareID, id) {
			return fmt.Errorf("attach share %s to %s: %w: share.tag %q is already used on the instance by share %s", id, t.Name, store.ErrConflict, tag, x.ShareID)
		}
	}
	if sh.Proto == types.ShareProtoLocal {
		if _, err := checkLocalExport(s.root, s.mounts.base, sh.Export); err != nil {
			// Not the caller's input, and the export location is
			// admin-only: no details here, nor in the log line.
			return fmt.Errorf("attach share %s: %w: the share's directory is missing, not a directory, or no longer inside the share root on this host (an administrator sees its export location with hostctl share show)", id, part.ErrState)
		}
	} else if err := os.MkdirAll(s.mounts.Dir(id), 0o700); err != nil {
		return fmt.Errorf("attach share %s: %w", id, err)
	}
	return nil
}

// beginAttach records a new mapping m (attaching) and locks its share for
// the instance; r undoes both.
func (s *Service) beginAttach(ctx context.Context, r *revert.Reverter, m *Mapping) error {
	if err := createMapping(ctx, s.st, m); err != nil {
		return err
	}
	mm := *m
	r.Add("remove the mapping", func(ctx context.Context) error { return s.dropMapping(ctx, mm) })
	if err := s.step(ctx, "lock"); err != nil {
		return err
	}
	if _, err := lock(ctx, s.st, m.ShareID, Holder{Instance: m.Instance, Name: m.InstanceName, Host: m.Host}); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("attach share %s: the share was deleted meanwhile: %w", m.ShareID, err)
		}
		return err
	}
	r.Add("unlock the share", func(ctx context.Context) error {
		sh, err := unlock(ctx, s.st, mm.ShareID, mm.Instance)
		if err == nil {
			err = s.revokeUnheld(ctx, sh)
		}
		return err
	})
	if m.Proto == ProtoCephFS {
		if err := s.grant(ctx, m.ShareID, m.Export); err != nil {
			return fmt.Errorf("attach share %s: %w", m.ShareID, err)
		}
	}
	return s.step(ctx, "apply")
}

// finishAttach moves a mapping whose instance was redefined with its
// share from attaching to inactive.
func (s *Service) finishAttach(ctx context.Context, m *Mapping) error {
	if err := s.step(ctx, "inactive"); err != nil {
		return err
	}
	if err := transition(ctx, s.st, m, types.ShareInactive, "", types.ShareAttaching); err != nil {
		return err
	}
	s.log.Info("share attached", "share", m.ShareID, "instance", m.InstanceName, "tag", m.Tag, "status", m.Status)
	s.emit(ctx, EventAttached, *m)
	return nil
}

// attachLive finishes an attach to a running instance: the NFS export
// mounted on the host, the share hot-plugged (the mapping is attaching
// and locked; r undoes both), the mapping active.
func (s *Service) attachLive(ctx context.Context, r *revert.Reverter, lc LiveCore, m Mapping, p types.Principal) (types.ShareMapping, error) {
	if hostMounted(m.Proto) {
		if err := s.mounts.acquire(ctx, m.ShareID, m.Proto, m.Export, m.Instance); err != nil {
			return types.ShareMapping{}, err
		}
		r.Add("release the host mount", func(ctx context.Context) error { return s.mounts.Release(ctx, m.ShareID, m.Instance) })
	}
	if _, err := s.plugLive(ctx, lc, m.InstanceName, model.Share{ShareID: m.ShareID, Tag: m.Tag, Source: s.sourceOf(m)}); err != nil {
		return types.ShareMapping{}, err
	}
	r.Add("hot-unplug the share", func(ctx context.Context) error {
		_, err := s.unplugLive(ctx, lc, m.InstanceName, m.ShareID)
		return err
	})
	if err := s.step(ctx, "inactive"); err != nil {
		return types.ShareMapping{}, err
	}
	if err := transition(ctx, s.st, &m, types.ShareActive, "", types.ShareAttaching); err != nil {
		return types.ShareMapping{}, err
	}
	r.Success()
	s.log.Info("share attached live", "share", m.ShareID, "instance", m.InstanceName, "tag", m.Tag, "status", m.Status)
	s.emit(ctx, EventAttached, m)
	return m.View(isAdmin(p)), nil
}

// dropMapping deletes a mapping whatever its version (an undo step).
func (s *Service) dropMapping(ctx context.Context, m Mapping) error {
	err := s.st.DeleteRecord(ctx, mappingKey(m.Instance, m.ShareID), -1)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// reapply applies an instance's stored spec again (its mapped shares are
// merged in by the part's Complete).
func (s *Service) reapply(ctx context.Context, name string) error {
	rec, err := s.st.Instance(ctx, name)
	if err != nil {
		return err
	}
	in, err := decodeSpec(rec)
	if err != nil {
		return err
	}
	return s.inst.Reapply(ctx, in)
}

// DetachShare detaches a share from a server that is SHUTOFF (or in
// error): the mapping moves to detaching, the instance's domain is
// redefined without the share and its metadata republished, the host
// mount (if any) released, the share unlocked for the instance (its
// access revoked when no instance on any host holds it), and the mapping
// removed.
//
// With live, the share is hot-unplugged from a running instance instead
// (vmeta's extension of the specification, see AttachShare).
func (s *Service) DetachShare(ctx context.Context, p types.Principal, server, shareID string, live bool) (types.ShareMapping, error) {
	rec, err := s.server(ctx, p, server)
	if err != nil {
		return types.ShareMapping{}, err
	}
	id, err := CheckUUID("share_id", shareID)
	if err != nil {
		return types.ShareMapping{}, err
	}
	if !s.owns(rec) {
		return types.ShareMapping{}, fmt.Errorf("detach share from %s: %w: %s lives on %s (this is %s)", rec.Name, ErrOtherHost, rec.Name, rec.Host, s.host)
	}
	defer s.locks.Lock(rec.UUID)()
	m, err := loadMapping(ctx, s.st, rec.UUID, id)
	if errors.Is(err, store.ErrNotFound) {
		return types.ShareMapping{}, fmt.Errorf("detach share %s from %s: %w: the share is not attached to it", id, rec.Name, store.ErrNotFound)
	}
	if err != nil {
		return types.ShareMapping{}, err
	}
	state, err := s.stateOf(ctx, rec)
	if err != nil {
		return types.ShareMapping{}, err
	}
	live = live && state == "running"
	lc, _ := s.inst.(LiveCore)
	switch {
	case live && lc == nil:
		return types.ShareMapping{}, fmt.Errorf("detach share %s from %s: %w: live detach is not available here", id, rec.Name, part.ErrState)
	case !live && !shutOff(state) && state != StateMissing:
		return types.ShareMapping{}, fmt.Errorf("detach share %s from %s: %w: the instance is %s; shares are detached from SHUTOFF or ERROR instances (stop it first, or --live to hot-unplug it)", id, rec.Name, part.ErrState, state)
	}
	prev := m.Status
	if m.Status != types.ShareDetaching {
		if err := transition(ctx, s.st, &m, types.ShareDetaching, "", types.ShareInactive, types.ShareError, types.ShareActive, types.ShareAttaching); err != nil {
			return types.ShareMapping{}, err
		}
	}
	view := m.View(isAdmin(p))
	if live {
		warnings, err := s.unplugLive(ctx, lc, rec.Name, id)
		if err != nil {
			if prev != types.ShareDetaching {
				if terr := transition(ctx, s.st, &m, prev, m.Error, types.ShareDetaching); terr != nil {
					s.log.Warn("share mapping left detaching after a failed live detach", "share", id, "err", terr)
				}
			}
			return types.ShareMapping{}, err
		}
		for _, w := range warnings {
			s.log.Warn("live detach", "share", id, "instance", rec.Name, "warning", w)
		}
		return view, s.finishDetach(ctx, m, false)
	}
	if err := s.finishDetach(ctx, m, true); err != nil {
		return view, err
	}
	return view, nil
}

// finishDetach completes a mapping in status detaching: the instance is
// redefined without the share (when withApply and the instance still
// exists), the host mount released, the share unlocked, the mapping
// removed. Each step may be repeated (the reconciler resumes here).
func (s *Service) finishDetach(ctx context.Context, m Mapping, withApply bool) error {
	if err := s.step(ctx, "detach-apply"); err != nil {
		return err
	}
	if withApply {
		if err := s.reapply(ctx, m.InstanceName); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("detach %v: %w", m, err)
		}
	}
	if hostMounted(m.Proto) {
		if err := s.mounts.Release(ctx, m.ShareID, m.Instance); err != nil {
			return fmt.Errorf("detach %v: %w (the reconciler retries)", m, err)
		}
	}
	if err := s.step(ctx, "unlock"); err != nil {
		return err
	}
	sh, err := unlock(ctx, s.st, m.ShareID, m.Instance)
	if err != nil {
		return fmt.Errorf("detach %v: %w", m, err)
	}
	if sh.ID != "" && len(sh.Holders) == 0 {
		if err := s.revokeUnheld(ctx, sh); err != nil {
			return fmt.Errorf("detach %v: %w (the reconciler retries)", m, err)
		}
		s.log.Info("share no longer used by any instance on any host; access revoked", "share", m.ShareID)
	}
	if err := s.step(ctx, "delete-mapping"); err != nil {
		return err
	}
	if err := deleteMapping(ctx, s.st, m); err != nil {
		return err
	}
	s.log.Info("share detached", "share", m.ShareID, "instance", m.InstanceName, "tag", m.Tag)
	s.emit(ctx, EventDetached, m)
	return nil
}

func (s *Service) emit(ctx context.Context, typ string, m Mapping) {
	if s.events == nil {
		return
	}
	if _, err := s.events.Emit(ctx, Stream, typ, m.event()); err != nil {
		s.log.Warn("share event not recorded", "type", typ, "share", m.ShareID, "err", err)
	}
	s.instanceUpdate(ctx, m.Instance, m.InstanceName)
}

// InstanceStream and EventInstanceUpdate are the instance-update events
// of Options.InstanceUpdateEvents.
const (
	InstanceStream      = events.StreamInstances
	EventInstanceUpdate = "instance.update"
)

// InstanceUpdatePayload is an instance.update event: the instance and all
// its share mappings (without export locations).
type InstanceUpdatePayload struct {
	Instance string         `json:"instance_uuid"`
	Name     string         `json:"name"`
	Shares   []EventPayload `json:"shares"`
}

// instanceUpdate emits an instance.update event with the instance's
// mappings as they are now, when the option is on.
func (s *Service) instanceUpdate(ctx context.Context, uuid, name string) {
	if s.events == nil || !s.instEvts {
		return
	}
	ms, err := mappings(ctx, s.st, uuid)
	if err != nil {
		s.log.Warn("instance.update event not emitted", "instance", name, "err", err)
		return
	}
	p := InstanceUpdatePayload{Instance: uuid, Name: name, Shares: []EventPayload{}}
	for _, m := range ms {
		p.Shares = append(p.Shares, m.event())
	}
	if _, err := s.events.Emit(ctx, InstanceStream, EventInstanceUpdate, p); err != nil {
		s.log.Warn("instance.update event not recorded", "instance", name, "err", err)
	}
}

func decodeSpec(rec store.Instance) (*model.Instance, error) {
	var in model.Instance
	if err := json.Unmarshal(rec.Spec, &in); err != nil {
		return nil, fmt.Errorf("instance %s: decode stored spec: %w", rec.Name, err)
	}
	return &in, nil
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// grant gives this host's CephX client access to a CephFS share's path
// (its first mapping on this host).
func (s *Service) grant(ctx context.Context, id, export string) error {
	if s.cephx == nil {
		return fmt.Errorf("%w: %w", part.ErrState, ErrCephXNotConfigured)
	}
	exp, err := ParseCephFSExport(export)
	if err != nil {
		return fmt.Errorf("the stored export location is not a CephFS export")
	}
	return s.cephx.Grant(ctx, id, exp)
}

// revokeUnheld revokes a CephFS share's path from every host's client
// when no instance on any host holds the share any more.
func (s *Service) revokeUnheld(ctx context.Context, sh Share) error {
	if sh.ID == "" || sh.Proto != ProtoCephFS || len(sh.Holders) > 0 || s.cephx == nil {
		return nil
	}
	return s.cephx.Revoke(ctx, sh.ID)
}

// sourceOf is the host directory virtiofsd exports for a mapping.
func (s *Service) sourceOf(m Mapping) string {
	if hostMounted(m.Proto) {
		return s.mounts.Dir(m.ShareID)
	}
	return m.Export
}

// CephX is this host's CephX client (nil without one).
func (s *Service) CephX() *CephX { return s.cephx }

// CephAuth takes the admin keyring of `hostctl share ceph-auth`
// (administrators only): see CephX.ConfigureAdmin.
func (s *Service) CephAuth(ctx context.Context, p types.Principal, req types.CephAuthRequest) (types.CephAuthResult, error) {
	if !isAdmin(p) {
		return types.CephAuthResult{}, fmt.Errorf("ceph-auth: %w: only administrators give the admin keyring", ErrForbidden)
	}
	if s.cephx == nil {
		return types.CephAuthResult{}, fmt.Errorf("ceph-auth: %w: this hostctl has no key manager for CephX keys", part.ErrState)
	}
	kr := []byte(req.AdminKeyring)
	defer clear(kr)
	ver, err := s.cephx.ConfigureAdmin(ctx, kr, req.Mons)
	if err != nil {
		return types.CephAuthResult{}, fmt.Errorf("ceph-auth: %w", err)
	}
	gen, err := s.cephx.Generation(ctx)
	if err != nil {
		return types.CephAuthResult{}, err
	}
	return types.CephAuthResult{CephVersion: ver, Client: ClientName(s.cephx.host, gen)}, nil
}
