package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vmeta/vmeta/internal/crashpoint"
	"github.com/vmeta/vmeta/internal/store"
)

// Evacuation (issue 24 item 3): an instance whose host is down is rebuilt
// on another host of the store, from its image and flavor. Unlike a move,
// nothing travels between hosts (the old one is down): the new host
// drives the evacuation alone, and the old host, when it comes back,
// removes what it still holds of the instance.
//
// An evacuation is a store record ("evacuation/<old host>/<uuid>") that
// every step writes with a version check. On the new host
// (EvacuateSteps): the record is made (the old host down, the parts not
// refusing part.Evacuate, the disks plannable here: nothing changed
// yet), the instance's record taken over from the old host (one
// compare-and-swap, the old host checked down again just before), the
// old disks' secrets noted in the evacuation record, their block-device
// record dropped (the disks are on the old host; their secrets stay
// wrapped under its key), the instance rebuilt as an apply does for
// part.Evacuate (new disks — encrypted ones under new secrets wrapped by
// this host's key —, a new one-time-use device claimed and burned, DHCP
// entries, config drive and firmware entries, the metadata published
// from here) and started. The record then says evacuated; it stays until
// the old host comes back.
//
// On the old host, when its hostctl starts (Sweep, before the reconciler)
// and then periodically, for each evacuation from it (SweepSteps): its
// domain destroyed and undefined, its libvirt secrets undefined and its
// instance directory removed, the old secrets deleted from the key
// manager (with their disks), the parts told (part.Mover with
// part.Evacuate: passthrough claims released — a burned device stays
// burned until an operator cleans it —, DHCP entries removed); then the
// record goes. An evacuation the old host finds before the new host took
// the instance over is cancelled: the host is back, the instance stays
// its.
//
// A crash at any step leaves the record at its step: `hostctl instance
// evacuate NAME --to HOST` again resumes it on the new host; the old
// host's sweep resumes its clean-up.

// The states of an evacuation, as `hostctl instance show` names them
// (only Evacuating refuses other operations on the instance).
const (
	// Evacuating: the new host is rebuilding the instance, or stopped at
	// Step (Error says why).
	Evacuating = "evacuating"
	// Evacuated: the instance runs on the new host; the old host has not
	// come back to remove its copy yet.
	Evacuated = "evacuated"
	// Cleaning: the old host is back and removing its copy.
	Cleaning = "cleaning"
)

// EvacProcedure names the crash points of evacuations
// ("evacuate/<step>").
const EvacProcedure = "evacuate"

// The steps of an evacuation on the new host, and of the old host's
// clean-up, in order (the crash matrix of evacuate_test.go is taken from
// these lists).
var (
	EvacuateSteps = []string{"recorded", "owner-switched", "secrets-noted", "disks-released", "rebuilt", "started"}
	SweepSteps    = []string{"cleaning", "domain-removed", "secrets-deleted", "released"}
)

func init() {
	crashpoint.Declare(EvacProcedure, EvacuateSteps...)
	crashpoint.Declare(EvacProcedure, SweepSteps...)
}

// Evacuation is an evacuation as stored.
type Evacuation struct {
	Instance string `json:"instance"`
	UUID     string `json:"uuid"`
	// Source is the host that was down, Dest the host that rebuilds.
	Source string `json:"source"`
	Dest   string `json:"dest"`
	State  string `json:"state"`
	// Step is the last step done (EvacuateSteps, then SweepSteps).
	Step  string `json:"step"`
	Error string `json:"error,omitempty"`
	// Spec is the instance's spec as the old host had it: the old host's
	// clean-up reads its name, UUID and NICs from it, whatever happened
	// to the instance since.
	Spec json.RawMessage `json:"spec"`
	// OldSecrets are the key-manager secrets of the old host's disks,
	// wrapped under its key: it deletes them with the disks.
	OldSecrets []string  `json:"old_secrets,omitempty"`
	Started    time.Time `json:"started"`
	Updated    time.Time `json:"updated"`
	// Version is the store record's version.
	Version int64 `json:"-"`
}

// EvacKey is the store key of the evacuation of instance uuid from host
// source.
func EvacKey(source, uuid string) string { return evacPrefix + source + "/" + uuid }

const evacPrefix = "evacuation/"

func (rec Evacuation) key() string { return EvacKey(rec.Source, rec.UUID) }

func (rec Evacuation) done(steps []string, step string) bool {
	at, want := slices.Index(steps, rec.Step), slices.Index(steps, step)
	return at >= 0 && want >= 0 && want <= at
}

// Evacuations lists the evacuations in the store: all ("" source) or
// those from host source.
func Evacuations(ctx context.Context, st Records, source string) ([]Evacuation, error) {
	prefix := evacPrefix
	if source != "" {
		prefix += source + "/"
	}
	rs, err := st.Records(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("list evacuations: %w", err)
	}
	out := make([]Evacuation, 0, len(rs))
	for _, r := range rs {
		var rec Evacuation
		if err := json.Unmarshal(r.Value, &rec); err != nil {
			return nil, fmt.Errorf("evacuation record %s: %w", r.Key, err)
		}
		rec.Version = r.Version
		out = append(out, rec)
	}
	return out, nil
}

// EvacuationOf is the evacuation of instance uuid that is under way
// (state evacuating), ok false when none is.
func EvacuationOf(ctx context.Context, st Records, uuid string) (Evacuation, bool, error) {
	all, err := Evacuations(ctx, st, "")
	if err != nil {
		return Evacuation{}, false, err
	}
	for _, rec := range all {
		if rec.UUID == uuid && rec.State == Evacuating {
			return rec, true, nil
		}
	}
	return Evacuation{}, false, nil
}

func putEvacuation(ctx context.Context, st Records, rec Evacuation) (Evacuation, error) {
	val, err := json.Marshal(rec)
	if err != nil {
		return Evacuation{}, err
	}
	r, err := st.PutRecord(ctx, rec.key(), val, rec.Version)
	if err != nil {
		return Evacuation{}, fmt.Errorf("write evacuation of %s: %w", rec.Instance, err)
	}
	rec.Version = r.Version
	return rec, nil
}

// EvacDest is this host as the new host of an evacuation
// (evacuate_host.go implements it over the controller core). Every call
// may be repeated: a resumed evacuation calls again the step that did not
// finish.
type EvacDest interface {
	// Instance is the store's record of instance name, of any host.
	Instance(ctx context.Context, name string) (store.Instance, error)
	// CheckEvacuate refuses, changing nothing, an instance that cannot be
	// rebuilt here: this host's own, its host alive (the heartbeat
	// fresh), a part refusing part.Evacuate (a shelved one, a share this
	// host cannot mount), this host without a hypervisor, with a domain of
	// its name already, or lacking what its disks are made from (its
	// image).
	CheckEvacuate(ctx context.Context, rec store.Instance) error
	// SourceDown returns nil when rec.Source is down.
	SourceDown(ctx context.Context, rec Evacuation) error
	// TakeOver makes this host the instance's owner (one compare-and-swap
	// from rec.Source) and tells the parts (part.Evacuate committed: the
	// share mappings follow).
	TakeOver(ctx context.Context, rec Evacuation) error
	// OldSecrets are the key-manager secrets of the instance's disks as
	// its block-device record names them.
	OldSecrets(ctx context.Context, uuid string) ([]string, error)
	// ReleaseDisks drops the block-device record of the old host's disks
	// (the secrets stay: the old host deletes them).
	ReleaseDisks(ctx context.Context, rec Evacuation) error
	// Rebuild removes what an earlier attempt left here and rebuilds the
	// instance for part.Evacuate: the parts' claims, new disks, domain
	// defined, metadata published.
	Rebuild(ctx context.Context, rec Evacuation) error
	// Boot starts the instance's domain (a running one as it is).
	Boot(ctx context.Context, rec Evacuation) error
}

// EvacSource is this host as the old host of evacuated instances, back.
type EvacSource interface {
	// Reclaim keeps an instance this host still owns: its record
	// rewritten (so a new host's takeover, by compare-and-swap on the
	// record, fails); false when another host owns it now.
	Reclaim(ctx context.Context, rec Evacuation) (bool, error)
	// RemoveLocal destroys and undefines the instance's domain here,
	// undefines its libvirt secrets and removes its instance directory.
	RemoveLocal(ctx context.Context, rec Evacuation) error
	// DeleteSecrets deletes the old disks' key-manager secrets.
	DeleteSecrets(ctx context.Context, rec Evacuation) error
	// Release tells the parts (part.Mover, part.Evacuate) the instance
	// left this host: its device claims (burned devices stay burned) and
	// DHCP entries go.
	Release(ctx context.Context, rec Evacuation) error
}

// Evacuator runs this host's side of evacuations: it rebuilds here the
// instances of down hosts (Evacuate) and removes what this host still
// holds of its instances evacuated while it was down (Sweep).
type Evacuator struct {
	Store  Records
	Host   string
	Dest   EvacDest
	Source EvacSource
	Log    *slog.Logger
	// Emit sends an audit event (instance.evacuate.*); nil: none.
	Emit func(ctx context.Context, typ string, payload map[string]string)
	// hook runs after each step's record is written (tests: an error
	// stops the procedure there as a crash would).
	hook func(step string) error

	mu      sync.Mutex
	running map[string]bool
}

func (e *Evacuator) log() *slog.Logger {
	if e.Log == nil {
		return slog.Default()
	}
	return e.Log
}

func (e *Evacuator) hold(name, uuid string) (func(), error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running == nil {
		e.running = map[string]bool{}
	}
	if e.running[uuid] {
		return nil, fmt.Errorf("%w: an evacuation of %s is running", ErrState, name)
	}
	e.running[uuid] = true
	return func() {
		e.mu.Lock()
		delete(e.running, uuid)
		e.mu.Unlock()
	}, nil
}

func (e *Evacuator) step(ctx context.Context, rec *Evacuation, step string) error {
	rec.Step, rec.Error, rec.Updated = step, "", time.Now().UTC()
	next, err := putEvacuation(ctx, e.Store, *rec)
	if err != nil {
		return err
	}
	*rec = next
	crashpoint.Hit(crashpoint.Name(EvacProcedure, step))
	if e.hook != nil {
		return e.hook(step)
	}
	return nil
}

func (e *Evacuator) emit(ctx context.Context, typ string, rec Evacuation, extra map[string]string) {
	if e.Emit == nil {
		return
	}
	p := map[string]string{"name": rec.Instance, "uuid": rec.UUID, "source": rec.Source, "dest": rec.Dest, "state": rec.State, "step": rec.Step}
	for k, v := range extra {
		p[k] = v
	}
	e.Emit(ctx, typ, p)
}

// stopped records why rec stopped and returns the request's error.
func (e *Evacuator) stopped(ctx context.Context, rec *Evacuation, err error) error {
	rec.Error, rec.Updated = err.Error(), time.Now().UTC()
	if next, perr := putEvacuation(context.WithoutCancel(ctx), e.Store, *rec); perr == nil {
		*rec = next
	}
	e.emit(ctx, "instance.evacuate.failed", *rec, map[string]string{"error": err.Error()})
	return fmt.Errorf("evacuate %s: %w; the evacuation is %s (step %q): `hostctl instance evacuate %s --to %s` resumes it", rec.Instance, err, rec.State, rec.Step, rec.Instance, rec.Dest)
}

// Evacuate rebuilds instance name, whose host is down, on this host
// (dest must name it: the new host drives the evacuation), or resumes
// its evacuation here. Bad requests — no host, another host, an instance
// of this host or of a live one, one the parts refuse, one whose disks
// cannot be made here — are refused before anything changes.
func (e *Evacuator) Evacuate(ctx context.Context, name, dest string) (Evacuation, error) {
	switch {
	case strings.TrimSpace(dest) == "":
		return Evacuation{}, fmt.Errorf("evacuate %s: %w: host: required (the host to rebuild the instance on)", name, ErrInvalid)
	case dest != e.Host:
		return Evacuation{}, fmt.Errorf("evacuate %s: %w: host %q: is not this host (%s): the new host rebuilds the instance, so ask host %s's hostctl (its --socket)", name, ErrInvalid, dest, e.Host, dest)
	}
	srec, err := e.Dest.Instance(ctx, name)
	if err != nil {
		return Evacuation{}, fmt.Errorf("evacuate %s: %w", name, err)
	}
	release, err := e.hold(name, srec.UUID)
	if err != nil {
		return Evacuation{}, fmt.Errorf("evacuate %s: %w", name, err)
	}
	defer release()
	cur, ok, err := EvacuationOf(ctx, e.Store, srec.UUID)
	if err != nil {
		return Evacuation{}, fmt.Errorf("evacuate %s: %w", name, err)
	}
	if ok {
		if cur.Dest != e.Host {
			return cur, fmt.Errorf("evacuate %s: %w: it is being evacuated from %s to %s (step %q): ask host %s", name, ErrState, cur.Source, cur.Dest, cur.Step, cur.Dest)
		}
		e.log().Info("evacuation resumes", "name", name, "from", cur.Source, "after", cur.Step)
		return e.run(ctx, cur)
	}
	if err := e.Dest.CheckEvacuate(ctx, srec); err != nil {
		return Evacuation{}, fmt.Errorf("evacuate %s: %w", name, err)
	}
	now := time.Now().UTC()
	rec := Evacuation{Instance: name, UUID: srec.UUID, Source: srec.Host, Dest: e.Host, State: Evacuating, Spec: srec.Spec, Started: now, Updated: now}
	if rec, err = putEvacuation(ctx, e.Store, rec); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return Evacuation{}, fmt.Errorf("evacuate %s: %w: an evacuation of it from %s is recorded already (its host has not cleaned it up yet)", name, ErrState, srec.Host)
		}
		return Evacuation{}, fmt.Errorf("evacuate %s: %w", name, err)
	}
	e.log().Info("evacuation begins", "name", name, "uuid", rec.UUID, "from", rec.Source)
	e.emit(ctx, "instance.evacuate.started", rec, nil)
	if err := e.step(ctx, &rec, "recorded"); err != nil {
		return rec, e.stopped(ctx, &rec, err)
	}
	return e.run(ctx, rec)
}

// run does the steps of EvacuateSteps rec has not done.
func (e *Evacuator) run(ctx context.Context, rec Evacuation) (Evacuation, error) {
	do := []struct {
		step string
		fn   func() error
	}{
		{"owner-switched", func() error {
			if err := e.Dest.SourceDown(ctx, rec); err != nil {
				return err
			}
			return e.Dest.TakeOver(ctx, rec)
		}},
		{"secrets-noted", func() error {
			ids, err := e.Dest.OldSecrets(ctx, rec.UUID)
			rec.OldSecrets = ids
			return err
		}},
		{"disks-released", func() error { return e.Dest.ReleaseDisks(ctx, rec) }},
		{"rebuilt", func() error { return e.Dest.Rebuild(ctx, rec) }},
		{"started", func() error { return e.Dest.Boot(ctx, rec) }},
	}
	for _, d := range do {
		if rec.done(EvacuateSteps, d.step) {
			continue
		}
		err := d.fn()
		if err != nil && d.step == "started" {
			return rec, e.startFailed(ctx, &rec, err)
		}
		if err != nil {
			return rec, e.stopped(ctx, &rec, fmt.Errorf("%s: %w", d.step, err))
		}
		if d.step == "started" {
			rec.State = Evacuated
		}
		if err := e.step(ctx, &rec, d.step); err != nil {
			return rec, e.stopped(ctx, &rec, err)
		}
	}
	e.log().Info("instance evacuated here; its old host removes its copy when it comes back", "name", rec.Instance, "from", rec.Source)
	e.emit(ctx, "instance.evacuate.done", rec, nil)
	return rec, nil
}

// startFailed ends an evacuation whose rebuilt instance did not start:
// the instance is this host's, defined here, and stays so — a start that
// fails is any start's failure, which `hostctl instance start` retries —
// so the evacuation is over (evacuated, Error naming the start's).
func (e *Evacuator) startFailed(ctx context.Context, rec *Evacuation, err error) error {
	rec.State = Evacuated
	if serr := e.step(ctx, rec, "started"); serr != nil {
		return e.stopped(ctx, rec, serr)
	}
	rec.Error = "start: " + err.Error()
	if next, perr := putEvacuation(context.WithoutCancel(ctx), e.Store, *rec); perr == nil {
		*rec = next
	}
	e.log().Warn("instance evacuated here, but its start failed", "name", rec.Instance, "from", rec.Source, "err", err)
	e.emit(ctx, "instance.evacuate.done", *rec, map[string]string{"error": rec.Error})
	return fmt.Errorf("evacuate %s: rebuilt on %s, but its start failed: %w; `hostctl instance start %s` retries it (the evacuation is over: %s removes its copy when it comes back)",
		rec.Instance, rec.Dest, err, rec.Instance, rec.Source)
}

// Sweep removes what this host still holds of its instances evacuated
// while it was down, and cancels the evacuations of its instances that
// had not taken them over yet. The daemon runs it before the reconciler
// and then periodically. Each evacuation's error is logged and joined;
// the next sweep tries again.
func (e *Evacuator) Sweep(ctx context.Context) error {
	recs, err := Evacuations(ctx, e.Store, e.Host)
	if err != nil {
		return err
	}
	var errs []error
	for _, rec := range recs {
		if err := e.sweepOne(ctx, rec); err != nil {
			e.log().Warn("evacuated instance's copy here not removed yet (the next sweep retries)", "name", rec.Instance, "to", rec.Dest, "err", err)
			errs = append(errs, fmt.Errorf("evacuation of %s to %s: %w", rec.Instance, rec.Dest, err))
		}
	}
	return errors.Join(errs...)
}

func (e *Evacuator) sweepOne(ctx context.Context, rec Evacuation) error {
	release, err := e.hold(rec.Instance, rec.UUID)
	if err != nil {
		return err
	}
	defer release()
	if rec.State == Evacuating && !rec.done(EvacuateSteps, "owner-switched") {
		kept, err := e.Source.Reclaim(ctx, rec)
		if err != nil {
			return err
		}
		if kept {
			if err := e.Store.DeleteRecord(ctx, rec.key(), rec.Version); err != nil && !isNotFound(err) {
				return err
			}
			e.log().Warn("evacuation cancelled: this host came back before the new host took the instance over", "name", rec.Instance, "to", rec.Dest)
			e.emit(ctx, "instance.evacuate.cancelled", rec, nil)
			return nil
		}
		// The new host won the race: its next step records it.
	}
	if rec.State == Evacuating {
		// The new host owns the instance, or is about to: this host's
		// copy must not run. The record is the new host's to write until
		// it is evacuated; the secrets and the record wait until then.
		return e.Source.RemoveLocal(ctx, rec)
	}
	if rec.State == Evacuated {
		rec.State = Cleaning
		if err := e.step(ctx, &rec, "cleaning"); err != nil {
			return err
		}
	}
	do := []struct {
		step string
		fn   func() error
	}{
		{"domain-removed", func() error { return e.Source.RemoveLocal(ctx, rec) }},
		{"secrets-deleted", func() error { return e.Source.DeleteSecrets(ctx, rec) }},
		{"released", func() error { return e.Source.Release(ctx, rec) }},
	}
	for _, d := range do {
		if rec.done(SweepSteps, d.step) {
			continue
		}
		if err := d.fn(); err != nil {
			return fmt.Errorf("%s: %w", d.step, err)
		}
		if err := e.step(ctx, &rec, d.step); err != nil {
			return err
		}
	}
	if err := e.Store.DeleteRecord(ctx, rec.key(), rec.Version); err != nil && !isNotFound(err) {
		return err
	}
	e.log().Info("evacuated instance's copy removed from this host", "name", rec.Instance, "now_on", rec.Dest, "secrets_deleted", len(rec.OldSecrets))
	e.emit(ctx, "instance.evacuate.cleaned", rec, nil)
	return nil
}

// RunSweeps runs Sweep every interval until ctx is done (the first one
// is the caller's, at start-up).
func (e *Evacuator) RunSweeps(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = e.Sweep(ctx) // logged per evacuation
		}
	}
}
