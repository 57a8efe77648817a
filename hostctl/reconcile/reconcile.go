// Package reconcile keeps hostctl's instances in line with libvirt. An
// instance whose domain is gone (or is another domain of its name) is
// marked missing; devices removed from its domain outside hostctl leave
// its metadata (republished); a domain that went off by itself has its
// parts told it stopped and its disks' passphrases taken out of libvirt;
// a part whose copy of the metadata drifted has it published again. It
// never deletes an instance or a device libvirt still has, and changes
// nothing when libvirtd cannot be asked.
//
// A Reconciler passes over every instance when it starts, after each
// reconnect to libvirtd and every Options.Interval (libvirt sends no
// event when only a domain's persistent definition changes, e.g. `virsh
// detach-disk --config`), and over the instance of every domain event in
// between.
//
// What it needs of the controller core (hostctl/controller implements
// it) is Core; of libvirt, Domains (*virt.Conn); of the disks part
// (hostctl/parts/disks), Disks. The daemon (hostctl/daemon) wires it and
// starts and stops it as one of its components.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// Core is the controller core as the reconciler drives it.
type Core interface {
	// Owned names the instances this host owns.
	Owned(ctx context.Context) ([]string, error)
	// Hold takes the lock of the instance named name and returns its
	// record and stored spec; rec is nil when there is no such instance,
	// another host owns it, or a state (shelved, rescued) keeps it from
	// its domain until unshelve or unrescue. release (never nil) ends the
	// hold.
	Hold(ctx context.Context, name string) (rec *store.Instance, spec *model.Instance, release func(), err error)
	// Stopped tells the parts that rec's domain went off by itself (the
	// share mappings go inactive, their host mounts released); a part
	// already told does nothing.
	Stopped(ctx context.Context, rec store.Instance)
	// Drifted says how a part's transport of spec no longer agrees with
	// its setting or the stored revision rev: the first such part's name
	// and reason, "" when none.
	Drifted(ctx context.Context, spec *model.Instance, rev int64) (part, reason string)
	// Republish publishes next in place of rec's spec old (the parts'
	// Defined phase first: DHCP leases of NICs that are gone go); a
	// failure undoes what it did.
	Republish(ctx context.Context, rec store.Instance, old, next *model.Instance) error
}

// Domains is libvirt as the reconciler reads it (*virt.Conn).
type Domains interface {
	// XML is the live XML of a running domain, the persistent one
	// otherwise.
	XML(ctx context.Context, name string, live bool) ([]byte, error)
	State(ctx context.Context, name string) (virt.State, error)
	// Events delivers domain events and the connection's disconnected
	// and reconnected events; nil when there are none. The reconciler
	// reads it until it is closed.
	Events() <-chan virt.Event
}

var _ Domains = (*virt.Conn)(nil)

// Disks is the disks part (hostctl/parts/disks) as the reconciler uses
// it.
type Disks interface {
	// UndefineSecrets takes the passphrases of an instance's disks out of
	// libvirt (its domain does not run, or is gone).
	UndefineSecrets(ctx context.Context, instUUID string) error
	// Sweep cleans up after crashes: libvirt secrets of domains that do
	// not run, key-manager secrets and records of instances that are gone.
	Sweep(ctx context.Context) error
}

// DefaultInterval is how often every instance is reconciled besides the
// passes libvirt's events trigger.
const DefaultInterval = time.Minute

// Options configure a Reconciler.
type Options struct {
	// Domains is libvirt (required).
	Domains Domains
	// Disks is the disks part; nil: the instances' disks have no secrets
	// to take out of libvirt and nothing to sweep.
	Disks Disks
	// Interval is how often every instance is reconciled besides the
	// passes events trigger; DefaultInterval when 0, never when negative.
	Interval time.Duration
	// Reconciled, when set, is called after every pass of the watcher
	// (every instance, or those of domain events); it must not block (the
	// daemon kicks its key rotation loop with it: a stopped instance's
	// disks rotate then).
	Reconciled func()
	Logger     *slog.Logger
}

// Reconciler brings a host's instances in line with libvirt.
type Reconciler struct {
	core       Core
	domains    Domains
	disks      Disks
	interval   time.Duration
	reconciled func()
	log        *slog.Logger

	mu      sync.Mutex
	missing map[string]bool // instances last seen without their domain

	stop context.CancelFunc
	done chan struct{}
}

// New returns a reconciler of core's instances against opts.Domains. It
// does nothing until Start, or a call of Reconcile.
func New(core Core, opts Options) *Reconciler {
	r := &Reconciler{core: core, domains: opts.Domains, disks: opts.Disks, interval: opts.Interval,
		reconciled: opts.Reconciled, log: opts.Logger, missing: map[string]bool{}}
	if r.interval == 0 {
		r.interval = DefaultInterval
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	return r
}

// Start starts following libvirt: a pass over every instance, then the
// passes of events and of the interval. Close stops it.
func (r *Reconciler) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.stop, r.done = cancel, make(chan struct{})
	go func() {
		defer close(r.done)
		r.watch(ctx)
	}()
}

// Close stops what Start started and waits for it (a pass under way ends
// at its next libvirt or store call).
func (r *Reconciler) Close() {
	if r.stop != nil {
		r.stop()
		<-r.done
	}
}

// Missing reports whether the instance named name was without its domain
// when it was last reconciled.
func (r *Reconciler) Missing(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.missing[name]
}

// watch reconciles every instance once, then again after each reconnect
// to libvirtd and every interval, and the instance of every domain event
// in between. Events are read by a goroutine of their own into a set of
// pending names, so delivery never waits for a reconcile (go-libvirt
// stalls every call while an event is not taken).
func (r *Reconciler) watch(ctx context.Context) {
	var mu sync.Mutex
	all, pending := true, map[string]bool{}
	kick := make(chan struct{}, 1)
	kick <- struct{}{}
	if events := r.domains.Events(); events != nil {
		go func() {
			for ev := range events {
				mu.Lock()
				switch {
				case ev.Kind == virt.EventDisconnected:
					r.log.Warn("libvirtd connection lost; reconciling once it is back")
				case ev.Kind == virt.EventReconnected:
					r.log.Info("libvirtd connection back; reconciling every instance")
					all = true
				case ev.Domain != "":
					r.log.Debug("libvirt event", "event", ev.String())
					pending[ev.Domain] = true
				}
				mu.Unlock()
				select {
				case kick <- struct{}{}:
				default:
				}
			}
		}()
	}
	var tick <-chan time.Time
	if r.interval > 0 {
		t := time.NewTicker(r.interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-tick:
			mu.Lock()
			all = true
			mu.Unlock()
		}
		mu.Lock()
		doAll, names := all, pending
		all, pending = false, map[string]bool{}
		mu.Unlock()
		if doAll {
			if err := r.Reconcile(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("reconcile", "err", err)
			}
		} else {
			for name := range names {
				if err := r.one(ctx, name); err != nil && ctx.Err() == nil {
					r.log.Warn("reconcile", "name", name, "err", err)
				}
			}
		}
		if r.reconciled != nil {
			r.reconciled()
		}
	}
}

// Reconcile brings every instance of this host in line with libvirt, then
// sweeps what crashes left of the disks' secrets. A libvirtd that cannot
// be asked ends the pass (the reconnect triggers another).
func (r *Reconciler) Reconcile(ctx context.Context) error {
	names, err := r.core.Owned(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	r.mu.Lock()
	for name := range r.missing {
		if !slices.Contains(names, name) {
			delete(r.missing, name) // deleted, or another host's now
		}
	}
	r.mu.Unlock()
	var errs []error
	for _, name := range names {
		if err := r.one(ctx, name); err != nil {
			errs = append(errs, err)
			if errors.Is(err, virt.ErrUnreachable) {
				break
			}
		}
	}
	if r.disks != nil {
		if err := r.disks.Sweep(ctx); err != nil {
			errs = append(errs, fmt.Errorf("reconcile: %w", err))
		}
	}
	return errors.Join(errs...)
}

// one reconciles the instance named name (if there is one).
func (r *Reconciler) one(ctx context.Context, name string) error {
	rec, in, release, err := r.core.Hold(ctx, name)
	defer release()
	if err != nil {
		return fmt.Errorf("reconcile %s: %w", name, err)
	}
	if rec == nil {
		r.forget(name)
		return nil
	}
	doc, err := r.domains.XML(ctx, name, true)
	if err != nil && !errors.Is(err, virt.ErrNotFound) {
		return fmt.Errorf("reconcile %s: %w", name, err)
	}
	var devs *virt.Devices
	if err == nil {
		if devs, err = virt.ParseDevices(doc); err != nil {
			return fmt.Errorf("reconcile %s: %w", name, err)
		}
	}
	if devs == nil || devs.UUID != rec.UUID {
		r.setMissing(name, true)
		return r.undefineSecrets(ctx, *rec)
	}
	r.setMissing(name, false)
	if st, err := r.domains.State(ctx, name); err == nil && st == virt.StateShutoff {
		// A guest that powered itself off: the parts are told it stopped,
		// and its disks' passphrases leave libvirt.
		r.core.Stopped(ctx, *rec)
		if err := r.undefineSecrets(ctx, *rec); err != nil {
			return err
		}
	}

	next, gone := withoutGone(in, devs)
	if err := devs.Apply(next); err != nil {
		return fmt.Errorf("reconcile %s: %w", name, err)
	}
	driftedPart, drifted := "", ""
	if reflect.DeepEqual(next, in) {
		if driftedPart, drifted = r.core.Drifted(ctx, in, rec.Revision); drifted == "" {
			return nil
		}
	}
	if err := r.core.Republish(ctx, *rec, in, next); err != nil {
		return fmt.Errorf("reconcile %s: %w", name, err)
	}
	switch {
	case drifted != "":
		// The part's reason ("firmware entries did not match
		// --firmware-metadata (…)") is the message.
		r.log.Info(drifted+"; republished (effective at the next boot)", "name", name, "part", driftedPart)
	case len(gone) > 0:
		r.log.Warn("devices removed outside hostctl; dropped from the metadata", "name", name, "devices", strings.Join(gone, ", "))
	default:
		r.log.Info("device addresses changed outside hostctl; metadata republished", "name", name)
	}
	return nil
}

// withoutGone returns a copy of in without the disks, NICs and shares
// its domain no longer has, and names those.
func withoutGone(in *model.Instance, devs *virt.Devices) (*model.Instance, []string) {
	next := in.Clone()
	var gone []string
	next.Disks = slices.DeleteFunc(next.Disks, func(d model.Disk) bool {
		_, ok := devs.Disk(d.Name)
		if !ok {
			gone = append(gone, "disk "+d.Name)
		}
		return !ok
	})
	next.NICs = slices.DeleteFunc(next.NICs, func(n model.NIC) bool {
		_, ok := devs.NIC(n.MAC)
		if !ok {
			gone = append(gone, "NIC "+n.MAC)
		}
		return !ok
	})
	next.Shares = slices.DeleteFunc(next.Shares, func(s model.Share) bool {
		_, ok := devs.Share(s.EffectiveTag())
		if !ok {
			gone = append(gone, "share "+s.EffectiveTag())
		}
		return !ok
	})
	return next, gone
}

func (r *Reconciler) undefineSecrets(ctx context.Context, rec store.Instance) error {
	if r.disks == nil {
		return nil
	}
	if err := r.disks.UndefineSecrets(ctx, rec.UUID); err != nil {
		return fmt.Errorf("reconcile %s: %w", rec.Name, err)
	}
	return nil
}

// setMissing records whether an instance's domain is missing and logs the
// transitions.
func (r *Reconciler) setMissing(name string, missing bool) {
	r.mu.Lock()
	was := r.missing[name]
	if missing {
		r.missing[name] = true
	} else {
		delete(r.missing, name)
	}
	r.mu.Unlock()
	switch {
	case missing && !was:
		r.log.Warn("instance marked missing: libvirt has no domain with its name and uuid (removed outside hostctl)", "name", name)
	case !missing && was:
		r.log.Info("instance's domain is back", "name", name)
	}
}

// forget drops what r knows of an instance that is gone, another host's
// or kept from its domain by a state.
func (r *Reconciler) forget(name string) {
	r.mu.Lock()
	delete(r.missing, name)
	r.mu.Unlock()
}
