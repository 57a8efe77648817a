package keyrotation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/store"
)

// Store is what the Engine keeps its records in.
type Store interface {
	store.Records
}

// Record keys, per host:
//
//	keyrotation/<host>/policy/<class>[/<instance uuid>]
//	keyrotation/<host>/status/<class>[/<instance uuid>]
//	keyrotation/<host>/tracking   when this host began tracking key status
const recordPrefix = "keyrotation/"

// Options configure an Engine.
type Options struct {
	// Host names this host controller (its records are its own).
	Host string
	// Version is the running vmeta version (version.String()), compared
	// with the version that minted the keys for WithVersionUpgrade.
	Version string
	Log     *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Engine keeps policies and statuses and runs the rotations they call
// for. It is safe for concurrent use; Run is serialised.
type Engine struct {
	st       Store
	opts     Options
	log      *slog.Logger
	mu       sync.Mutex // held by Run, Prune and Recover
	regMu    sync.RWMutex
	rotators map[Class]Rotator
	progMu   sync.Mutex
	progress map[string]Progress // live progress of running rotations, by subject
	kick     chan struct{}
}

// New returns an Engine on st.
func New(st Store, opts Options) *Engine {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Engine{st: st, opts: opts, log: opts.Log, rotators: map[Class]Rotator{},
		progress: map[string]Progress{}, kick: make(chan struct{}, 1)}
}

// Register sets the procedure of a class. A class without one is not
// rotated (Reports lists it with NoKeys).
func (e *Engine) Register(c Class, r Rotator) {
	e.regMu.Lock()
	defer e.regMu.Unlock()
	e.rotators[c] = r
}

func (e *Engine) rotator(c Class) Rotator {
	e.regMu.RLock()
	defer e.regMu.RUnlock()
	return e.rotators[c]
}

// Registered returns the classes with a procedure, in rotation order.
func (e *Engine) Registered() []Class {
	e.regMu.RLock()
	defer e.regMu.RUnlock()
	var out []Class
	for _, c := range Classes {
		if e.rotators[c] != nil {
			out = append(out, c)
		}
	}
	return out
}

// Kicked is signalled when a policy changes, so the caller's loop runs
// the Engine without waiting for its next period.
func (e *Engine) Kicked() <-chan struct{} { return e.kick }

func (e *Engine) signal() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

func (e *Engine) key(kind string, s Subject) string {
	k := recordPrefix + e.opts.Host + "/" + kind + "/" + string(s.Class)
	if s.InstanceUUID != "" {
		k += "/" + s.InstanceUUID
	}
	return k
}

// Recover runs every registered Recoverer, in class order: call it at
// start-up before anything uses the keys. It returns every failure.
func (e *Engine) Recover(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for _, c := range e.Registered() {
		if r, ok := e.rotator(c).(Recoverer); ok {
			if err := r.Recover(ctx); err != nil {
				errs = append(errs, fmt.Errorf("recover %s rotation: %w", c, err))
			}
		}
	}
	return errors.Join(errs...)
}

// tracking returns when this host began tracking key status (recording
// now on the first call): keys created before it existed before rotation
// was tracked (generation 0).
func (e *Engine) tracking(ctx context.Context) (time.Time, error) {
	type rec struct {
		Since   time.Time `json:"since"`
		Version string    `json:"version"`
	}
	now := e.opts.Now().UTC()
	v, err := store.UpdateJSON(ctx, e.st, recordPrefix+e.opts.Host+"/tracking", func(r *rec, exists bool) (bool, error) {
		if exists {
			return false, nil
		}
		*r = rec{Since: now, Version: e.opts.Version}
		return true, nil
	})
	return v.Since, err
}

// MarkCreated records that a subject's keys were just created by this
// version (generation 1), unless it has a status already. The daemon
// calls it when it creates a key (the first KEK, the token key file).
func (e *Engine) MarkCreated(ctx context.Context, s Subject) error {
	_, err := store.UpdateJSON(ctx, e.st, e.key("status", s), func(st *Status, exists bool) (bool, error) {
		if exists {
			return false, nil
		}
		*st = Status{KeyGeneration: 1, KeyVersion: e.opts.Version, Updated: e.opts.Now().UTC()}
		return true, nil
	})
	return err
}

// ForgetInstance deletes the policy and status records of an instance
// of host (this engine's host when empty; a force-deleted instance's
// host is another) for every per-instance class: the instance is gone.
func (e *Engine) ForgetInstance(ctx context.Context, host, uuid string) error {
	if uuid == "" {
		return fmt.Errorf("forget key rotation records: %w: no instance UUID", ErrInvalid)
	}
	if host == "" {
		host = e.opts.Host
	}
	var errs []error
	for _, c := range Classes {
		if !c.PerInstance() {
			continue
		}
		for _, kind := range []string{"policy", "status"} {
			k := recordPrefix + host + "/" + kind + "/" + string(c) + "/" + uuid
			if err := e.st.DeleteRecord(ctx, k, -1); err != nil && !errors.Is(err, store.ErrNotFound) {
				errs = append(errs, fmt.Errorf("delete %s: %w", k, err))
			}
		}
	}
	e.progMu.Lock()
	for _, c := range Classes {
		delete(e.progress, Subject{Class: c, InstanceUUID: uuid}.String())
	}
	e.progMu.Unlock()
	return errors.Join(errs...)
}

// Policy returns the policy of a subject: its own record, else (for an
// instance) its class's, else Disabled.
func (e *Engine) Policy(ctx context.Context, s Subject) (Policy, error) {
	p, _, err := store.GetJSON[Policy](ctx, e.st, e.key("policy", s))
	if errors.Is(err, store.ErrNotFound) && s.InstanceUUID != "" {
		p, _, err = store.GetJSON[Policy](ctx, e.st, e.key("policy", Subject{Class: s.Class}))
	}
	if errors.Is(err, store.ErrNotFound) {
		return Policy{KeyRotationPolicy: Disabled}, nil
	}
	if err != nil {
		return Policy{}, fmt.Errorf("key rotation policy of %s: %w", s, err)
	}
	if p.KeyRotationPolicy == "" {
		p.KeyRotationPolicy = Disabled
	}
	return p, nil
}

// SetPolicy stores a subject's policy: refused (ErrInvalid, ErrDecrease)
// when it is not valid for the class or, with the KeyGeneration policy,
// lowers the wanted generation below the stored policy's — nothing
// changes then. The other policies ignore keyGeneration: the stored
// wanted generation is kept (Merge).
func (e *Engine) SetPolicy(ctx context.Context, s Subject, p Policy) (Policy, error) {
	if err := p.Check(s.Class); err != nil {
		return Policy{}, err
	}
	if p.KeyRotationPolicy == "" {
		p.KeyRotationPolicy = Disabled
	}
	out, err := store.UpdateJSON(ctx, e.st, e.key("policy", s), func(cur *Policy, exists bool) (bool, error) {
		next := p
		if exists {
			if err := CheckUpdate(s.Class, *cur, p); err != nil {
				return false, err
			}
			next = Merge(*cur, p)
		}
		changed := !exists || !equalPolicy(*cur, next)
		*cur = next
		return changed, nil
	})
	if err != nil {
		return Policy{}, fmt.Errorf("set key rotation policy of %s: %w", s, err)
	}
	e.log.Info("key rotation policy set", "subject", s.String(), "policy", string(p.KeyRotationPolicy), "generation", p.KeyGeneration)
	e.signal()
	return out, nil
}

func equalPolicy(a, b Policy) bool {
	ka, kb := -1, -1
	if a.KeepPriorKeyCount != nil {
		ka = *a.KeepPriorKeyCount
	}
	if b.KeepPriorKeyCount != nil {
		kb = *b.KeepPriorKeyCount
	}
	return a.KeyRotationPolicy == b.KeyRotationPolicy && a.KeyGeneration == b.KeyGeneration && ka == kb
}

// Status returns a subject's status (the zero Status, generation 0, when
// none is recorded) with the live progress of a running rotation.
func (e *Engine) Status(ctx context.Context, s Subject) (Status, error) {
	st, _, err := store.GetJSON[Status](ctx, e.st, e.key("status", s))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return Status{}, fmt.Errorf("key rotation status of %s: %w", s, err)
	}
	e.progMu.Lock()
	if p, ok := e.progress[s.String()]; ok {
		st.Progress = &p
	}
	e.progMu.Unlock()
	return st, nil
}

// Report is a subject's policy and status.
type Report struct {
	Subject
	Policy Policy `json:"policy"`
	Status Status `json:"status"`
	// Complete: the status generation has reached the wanted one and
	// nothing is pending.
	Complete bool `json:"complete"`
	// NoKeys says why the class has no keys on this host yet ("": it
	// has): no instance with keys of a per-instance class, or no
	// procedure (its key file is not configured). Such a report is the
	// class's: its policy, nothing to rotate.
	NoKeys string `json:"no_keys,omitempty"`
	// Holders are the users still holding a prior key (class cephx: the
	// instances whose share mounts use a prior generation).
	Holders []Holder `json:"holders,omitempty"`
}

// Reasons of Report.NoKeys.
const (
	NoKeysNoInstance    = "no instance on this host has keys of this class"
	NoKeysNotConfigured = "not configured on this host"
)

// Reports returns the policy and status of every subject of every class
// (of class c only, when c is not empty); a class without a subject (no
// instance with keys of it, or no procedure on this host) is reported
// once, with its policy and NoKeys saying why.
func (e *Engine) Reports(ctx context.Context, c Class) ([]Report, error) {
	var out []Report
	for _, cl := range Classes {
		if c != "" && cl != c {
			continue
		}
		var (
			subjects []Subject
			none     = NoKeysNotConfigured
		)
		if e.rotator(cl) != nil {
			var err error
			if subjects, err = e.subjects(ctx, cl); err != nil {
				return nil, err
			}
			none = NoKeysNoInstance
		}
		if len(subjects) == 0 {
			p, err := e.Policy(ctx, Subject{Class: cl})
			if err != nil {
				return nil, err
			}
			out = append(out, Report{Subject: Subject{Class: cl}, Policy: p, Complete: true, NoKeys: none})
			continue
		}
		for _, s := range subjects {
			p, err := e.Policy(ctx, s)
			if err != nil {
				return nil, err
			}
			st, err := e.Status(ctx, s)
			if err != nil {
				return nil, err
			}
			rep := Report{Subject: s, Policy: p, Status: st,
				Complete: Complete(p, st) && st.Pending == "" && st.Target == 0}
			if h, ok := e.rotator(cl).(HolderLister); ok {
				if rep.Holders, err = h.Holders(ctx); err != nil {
					return nil, fmt.Errorf("holders of %s keys: %w", cl, err)
				}
			}
			out = append(out, rep)
		}
	}
	return out, nil
}

func (e *Engine) subjects(ctx context.Context, c Class) ([]Subject, error) {
	if !c.PerInstance() {
		return []Subject{{Class: c}}, nil
	}
	l, ok := e.rotator(c).(Lister)
	if !ok {
		return nil, nil
	}
	ss, err := l.Subjects(ctx)
	if err != nil {
		return nil, fmt.Errorf("list %s subjects: %w", c, err)
	}
	ss = slices.Clone(ss)
	slices.SortFunc(ss, func(a, b Subject) int {
		if a.InstanceName != b.InstanceName {
			if a.InstanceName < b.InstanceName {
				return -1
			}
			return 1
		}
		if a.InstanceUUID < b.InstanceUUID {
			return -1
		}
		if a.InstanceUUID > b.InstanceUUID {
			return 1
		}
		return 0
	})
	return ss, nil
}

// target returns the generation a subject must be rotated to (0: none),
// from its policy and status: an interrupted rotation's target first (a
// rotation once begun is finished, whatever the policy says since), then
// KeyGeneration above the status, then a newer vmeta version than the one
// that minted the keys.
func (e *Engine) target(p Policy, st Status) int64 {
	if st.Target > st.KeyGeneration {
		return st.Target
	}
	switch p.KeyRotationPolicy {
	case KeyGeneration:
		if p.KeyGeneration > st.KeyGeneration {
			return p.KeyGeneration
		}
	case WithVersionUpgrade:
		if Newer(e.opts.Version, st.KeyVersion) {
			return max(st.KeyGeneration+1, p.KeyGeneration)
		}
	}
	return 0
}

// Run brings every subject of every registered class to what its policy
// wants, one class at a time (in Classes order), one subject at a time,
// persisting each subject's status as soon as it is done. A failing
// subject is recorded in its status and the run goes on with the next;
// Run returns every failure.
func (e *Engine) Run(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	since, err := e.tracking(ctx)
	if err != nil {
		return fmt.Errorf("key rotation: %w", err)
	}
	var errs []error
	for _, c := range e.Registered() {
		subjects, err := e.subjects(ctx, c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := e.sweep(ctx, c, subjects); err != nil {
			errs = append(errs, err)
		}
		for _, s := range subjects {
			if err := e.runOne(ctx, s, since); err != nil {
				errs = append(errs, err)
			}
			if ctx.Err() != nil {
				return errors.Join(append(errs, ctx.Err())...)
			}
		}
	}
	return errors.Join(errs...)
}

func (e *Engine) runOne(ctx context.Context, s Subject, since time.Time) error {
	p, err := e.Policy(ctx, s)
	if err != nil {
		return err
	}
	st, err := e.current(ctx, s, since)
	if err != nil {
		return err
	}
	gen := e.target(p, st)
	if gen == 0 {
		if st.Pending != "" || st.Error != "" {
			_, err := e.putStatus(ctx, s, func(cur *Status, _ bool) bool {
				cur.Pending, cur.Error = "", ""
				return true
			})
			return err
		}
		return nil
	}
	if st.Target != gen {
		// The intent first: a restart finishes this rotation.
		if st, err = e.putStatus(ctx, s, func(cur *Status, _ bool) bool {
			cur.Target = gen
			return true
		}); err != nil {
			return err
		}
	}
	r := e.rotator(s.Class)
	e.log.Info("key rotation", "subject", s.String(), "from", st.KeyGeneration, "to", gen)
	res, rerr := r.Rotate(ctx, s, gen, p.Keep(s.Class), e.progressFunc(ctx, s))
	e.progMu.Lock()
	delete(e.progress, s.String())
	e.progMu.Unlock()
	if rerr != nil {
		e.log.Error("key rotation failed", "subject", s.String(), "to", gen, "err", rerr)
		_, _ = e.putStatus(context.WithoutCancel(ctx), s, func(cur *Status, _ bool) bool {
			cur.Error = rerr.Error()
			return true
		})
		return fmt.Errorf("rotate %s to generation %d: %w", s, gen, rerr)
	}
	if !res.Done {
		_, err := e.putStatus(ctx, s, func(cur *Status, _ bool) bool {
			cur.Pending, cur.Error = res.Pending, ""
			return true
		})
		return err
	}
	st, err = e.putStatus(ctx, s, func(cur *Status, _ bool) bool {
		cur.KeyGeneration = max(cur.KeyGeneration, gen)
		cur.KeyVersion = e.opts.Version
		cur.PriorKeyCount = res.PriorKeyCount
		if res.KeyCephVersion != "" {
			cur.KeyCephVersion = res.KeyCephVersion
		}
		cur.Target, cur.Pending, cur.Error, cur.Progress = 0, "", "", nil
		return true
	})
	if err != nil {
		return err
	}
	e.log.Info("key rotation complete", "subject", s.String(), "generation", gen)
	if p, err := e.Policy(ctx, s); err == nil && e.target(p, st) > gen {
		// A rotation begun before a higher one was asked (it waited for
		// an instance to stop): the higher one now, not a run later.
		return e.runOne(ctx, s, since)
	}
	return nil
}

// current returns a subject's status, recording it first when the
// subject has none yet: keys made since tracking began (since) are
// generation 1 of this version; older ones existed before tracking (0),
// unless the class's procedure knows their generation (the KEK file's).
func (e *Engine) current(ctx context.Context, s Subject, since time.Time) (Status, error) {
	st, _, err := store.GetJSON[Status](ctx, e.st, e.key("status", s))
	switch {
	case err == nil:
		return e.adopt(ctx, s, st)
	case !errors.Is(err, store.ErrNotFound):
		return Status{}, fmt.Errorf("key rotation status of %s: %w", s, err)
	}
	st = Status{Updated: e.opts.Now().UTC()}
	if !s.Created.IsZero() && !s.Created.Before(since) {
		st.KeyGeneration, st.KeyVersion = 1, e.opts.Version
	}
	// A procedure that knows its keys' generation says where keys made
	// before tracking are: a rotation is then asked only above it.
	if g, ok := e.rotator(s.Class).(Generationer); ok {
		n, err := g.Generation(ctx, s)
		if err != nil {
			return Status{}, fmt.Errorf("key generation of %s: %w", s, err)
		}
		st.KeyGeneration = max(st.KeyGeneration, n)
	}
	if v, ok := e.rotator(s.Class).(CephVersioner); ok {
		st.KeyCephVersion = v.KeyCephVersion(ctx)
	}
	return e.putStatus(ctx, s, func(cur *Status, exists bool) bool {
		if exists {
			return false
		}
		*cur = st
		return true
	})
}

// adopt moves a recorded status up to the generation the class's
// procedure says its keys are at, for a class whose keys are created
// outside a rotation after its status was first recorded (cephx: the
// host's client is created when the operator gives the admin keyring);
// never during a rotation (Target set), never down.
func (e *Engine) adopt(ctx context.Context, s Subject, st Status) (Status, error) {
	a, ok := e.rotator(s.Class).(GenerationAdopter)
	if !ok || !a.AdoptGeneration() || st.Target != 0 {
		return st, nil
	}
	n, err := a.Generation(ctx, s)
	if err != nil || n <= st.KeyGeneration {
		return st, err
	}
	return e.putStatus(ctx, s, func(cur *Status, _ bool) bool {
		if cur.Target != 0 || n <= cur.KeyGeneration {
			return false
		}
		cur.KeyGeneration = n
		if v, ok := a.(CephVersioner); ok && cur.KeyCephVersion == "" {
			cur.KeyCephVersion = v.KeyCephVersion(ctx)
		}
		return true
	})
}

// sweep deletes this host's records of a per-instance class that name
// an instance which no longer exists (subjects: the class's subjects,
// which do), when the class's procedure can tell (InstanceChecker).
func (e *Engine) sweep(ctx context.Context, c Class, subjects []Subject) error {
	check, ok := e.rotator(c).(InstanceChecker)
	if !c.PerInstance() || !ok {
		return nil
	}
	live := map[string]bool{}
	for _, s := range subjects {
		live[s.InstanceUUID] = true
	}
	var errs []error
	for _, kind := range []string{"policy", "status"} {
		prefix := recordPrefix + e.opts.Host + "/" + kind + "/" + string(c) + "/"
		recs, err := e.st.Records(ctx, prefix)
		if err != nil {
			errs = append(errs, fmt.Errorf("list %s records: %w", prefix, err))
			continue
		}
		for _, r := range recs {
			uuid := strings.TrimPrefix(r.Key, prefix)
			if uuid == "" || strings.Contains(uuid, "/") || live[uuid] {
				continue
			}
			exists, err := check.InstanceExists(ctx, uuid)
			if err != nil {
				errs = append(errs, fmt.Errorf("key rotation records of instance %s: %w", uuid, err))
				continue
			}
			if exists {
				live[uuid] = true
				continue
			}
			if err := e.st.DeleteRecord(ctx, r.Key, r.Version); err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
				errs = append(errs, fmt.Errorf("delete %s: %w", r.Key, err))
				continue
			}
			e.log.Info("key rotation record of a deleted instance deleted", "record", r.Key)
		}
	}
	return errors.Join(errs...)
}

// putStatus changes a subject's status record (stamping Updated).
func (e *Engine) putStatus(ctx context.Context, s Subject, change func(*Status, bool) bool) (Status, error) {
	st, err := store.UpdateJSON(ctx, e.st, e.key("status", s), func(cur *Status, exists bool) (bool, error) {
		if !change(cur, exists) {
			return false, nil
		}
		cur.Updated = e.opts.Now().UTC()
		return true, nil
	})
	if err != nil {
		return st, fmt.Errorf("key rotation status of %s: %w", s, err)
	}
	return st, nil
}

// progressFunc keeps a rotation's progress for Status, and persists it
// in the status record every twentieth of the way (so a restart shows
// where an interrupted rotation was).
func (e *Engine) progressFunc(ctx context.Context, s Subject) func(Progress) {
	last := -1
	return func(p Progress) {
		e.progMu.Lock()
		e.progress[s.String()] = p
		e.progMu.Unlock()
		step := max(p.Total/20, 1)
		if p.Done/step == last && p.Done != p.Total {
			return
		}
		last = p.Done / step
		_, _ = e.putStatus(ctx, s, func(cur *Status, _ bool) bool {
			cur.Progress = &p
			return true
		})
	}
}

// Prune drops an overlapping class's prior keys beyond keep (the operator
// says every party holding the keys has the current one).
func (e *Engine) Prune(ctx context.Context, c Class, keep int) (Status, error) {
	if !c.Overlapping() {
		return Status{}, fmt.Errorf("%w: %s: prune: only overlapping classes keep prior keys (%s)", ErrInvalid, c, Proxy)
	}
	if keep < 0 || keep > MaxKeepPriorKeyCount {
		return Status{}, fmt.Errorf("%w: %s: keep %d: must be 0 to %d", ErrInvalid, c, keep, MaxKeepPriorKeyCount)
	}
	pr, ok := e.rotator(c).(Pruner)
	if !ok {
		return Status{}, fmt.Errorf("%w: %s: this host has no procedure for it", ErrUnavailable, c)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	n, err := pr.Prune(ctx, keep)
	if err != nil {
		return Status{}, fmt.Errorf("prune %s: %w", c, err)
	}
	return e.putStatus(ctx, Subject{Class: c}, func(cur *Status, _ bool) bool {
		cur.PriorKeyCount = &n
		return true
	})
}

// Rotation is what a rotation request did.
type Rotation struct {
	// Policy is the subject's policy after the request (unchanged when
	// there is nothing to rotate).
	Policy
	// Subjects is how many subjects the rotation rotates (each is below
	// its generation); 0: the class (or the instance) has no keys on this
	// host yet, so nothing was asked.
	Subjects int `json:"subjects"`
}

// Rotate asks for one rotation now of a subject — for a per-instance
// class without an instance, of every instance of the class. The new
// target is one above the highest generation any of those subjects is
// at, is rotating to or is wanted at (a decrease is impossible by
// construction, and every subject is below it): the subject's policy
// becomes KeyGeneration at that target, and so does the own policy of
// every instance a class-wide request covers (an instance's own policy
// overrides its class's, and the request is for every instance). The
// rotations themselves run in the next Run. With no subject (no instance
// with keys of the class) nothing changes and Subjects is 0.
func (e *Engine) Rotate(ctx context.Context, s Subject) (Rotation, error) {
	if e.rotator(s.Class) == nil {
		return Rotation{}, fmt.Errorf("%w: %s: this host has no procedure for it", ErrUnavailable, s.Class)
	}
	since, err := e.tracking(ctx)
	if err != nil {
		return Rotation{}, fmt.Errorf("key rotation: %w", err)
	}
	targets := []Subject{s}
	if s.Class.PerInstance() {
		all, err := e.subjects(ctx, s.Class)
		if err != nil {
			return Rotation{}, err
		}
		targets = all
		if s.InstanceUUID != "" {
			targets = slices.DeleteFunc(all, func(t Subject) bool { return t.InstanceUUID != s.InstanceUUID })
		}
	}
	p, err := e.Policy(ctx, s)
	if err != nil {
		return Rotation{}, err
	}
	if len(targets) == 0 {
		return Rotation{Policy: p}, nil
	}
	top := p.KeyGeneration
	own := map[string]Policy{} // the instances' own policies
	for _, t := range targets {
		st, err := e.current(ctx, t, since)
		if err != nil {
			return Rotation{}, err
		}
		top = max(top, st.KeyGeneration, st.Target)
		if t.InstanceUUID == "" {
			continue
		}
		tp, _, err := store.GetJSON[Policy](ctx, e.st, e.key("policy", t))
		switch {
		case err == nil:
			own[t.InstanceUUID] = tp
			top = max(top, tp.KeyGeneration)
		case !errors.Is(err, store.ErrNotFound):
			return Rotation{}, fmt.Errorf("key rotation policy of %s: %w", t, err)
		}
	}
	next := Policy{KeyRotationPolicy: KeyGeneration, KeyGeneration: top + 1, KeepPriorKeyCount: p.KeepPriorKeyCount}
	if !s.Class.Overlapping() {
		next.KeepPriorKeyCount = nil
	}
	out, err := e.SetPolicy(ctx, s, next)
	if err != nil {
		return Rotation{}, err
	}
	if s.InstanceUUID == "" {
		for _, t := range targets {
			if _, ok := own[t.InstanceUUID]; !ok || t.InstanceUUID == "" {
				continue
			}
			if _, err := e.SetPolicy(ctx, t, next); err != nil {
				return Rotation{}, err
			}
		}
	}
	return Rotation{Policy: out, Subjects: len(targets)}, nil
}

// ErrUnavailable: the class has no procedure on this host.
var ErrUnavailable = errkind.New(errkind.Unsupported, "key rotation unavailable")
