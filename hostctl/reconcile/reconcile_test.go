package reconcile_test

// The reconciler's logic over hand-written fakes of the core, libvirt
// and the disks part. The controller's own tests (hostctl/controller:
// TestReconcile and the tests that call its Reconcile hook) drive it over
// the whole core.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/hostctl/reconcile"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
)

var errInjected = errors.New("injected")

// fakeCore is the controller core: records and specs by name, the
// instances a state holds, and what the reconciler asked of it.
type fakeCore struct {
	mu           sync.Mutex
	recs         map[string]store.Instance
	specs        map[string]*model.Instance
	stateHeld    map[string]bool
	drift        string // Drifted's reason for every instance
	republishErr error

	holding     int      // holds not yet released
	held        []string // Hold's names, in order
	stopped     []string
	republished map[string]*model.Instance
}

func newFakeCore() *fakeCore {
	return &fakeCore{recs: map[string]store.Instance{}, specs: map[string]*model.Instance{}, stateHeld: map[string]bool{},
		republished: map[string]*model.Instance{}}
}

// add stores in (as a record would round-trip it) at revision 3.
func (f *fakeCore) add(in *model.Instance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recs[in.Name] = store.Instance{Name: in.Name, UUID: in.UUID, Revision: 3}
	f.specs[in.Name] = in.Clone()
}

func (f *fakeCore) Owned(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	for n := range f.recs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

func (f *fakeCore) Hold(_ context.Context, name string) (*store.Instance, *model.Instance, func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = append(f.held, name)
	f.holding++
	release := func() { f.mu.Lock(); f.holding--; f.mu.Unlock() }
	rec, ok := f.recs[name]
	if !ok || f.stateHeld[name] {
		return nil, nil, release, nil
	}
	return &rec, f.specs[name].Clone(), release, nil
}

func (f *fakeCore) Stopped(_ context.Context, rec store.Instance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, rec.Name)
}

func (f *fakeCore) Drifted(context.Context, *model.Instance, int64) (string, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.drift == "" {
		return "", ""
	}
	return "firmware", f.drift
}

func (f *fakeCore) Republish(_ context.Context, rec store.Instance, old, next *model.Instance) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.republishErr != nil {
		return f.republishErr
	}
	if !equalJSON(old, f.specs[rec.Name]) {
		return fmt.Errorf("republish of %s: old is not the stored spec", rec.Name)
	}
	f.republished[rec.Name] = next
	f.specs[rec.Name] = next.Clone()
	return nil
}

// fakeLibvirt is libvirt: domain XML and states by name.
type fakeLibvirt struct {
	mu     sync.Mutex
	docs   map[string][]byte
	states map[string]virt.State
	xmlErr map[string]error
	asked  []string
	events chan virt.Event
}

func newFakeLibvirt() *fakeLibvirt {
	return &fakeLibvirt{docs: map[string][]byte{}, states: map[string]virt.State{}, xmlErr: map[string]error{}}
}

func (f *fakeLibvirt) XML(_ context.Context, name string, live bool) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, name)
	if !live {
		return nil, errors.New("the reconciler reads the live XML")
	}
	if err := f.xmlErr[name]; err != nil {
		return nil, err
	}
	doc, ok := f.docs[name]
	if !ok {
		return nil, fmt.Errorf("domain %s: %w", name, virt.ErrNotFound)
	}
	return doc, nil
}

func (f *fakeLibvirt) State(_ context.Context, name string) (virt.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.docs[name]; !ok {
		return "", virt.ErrNotFound
	}
	return f.states[name], nil
}

func (f *fakeLibvirt) Events() <-chan virt.Event {
	if f.events == nil {
		return nil
	}
	return f.events
}

// define gives libvirt a domain of in's name with uuid, its disks at the
// PCI slots of addrs (by disk name; 0x05 + index otherwise) and its NICs.
func (f *fakeLibvirt) define(in *model.Instance, uuid string, st virt.State, drop ...string) {
	var b strings.Builder
	fmt.Fprintf(&b, "<domain type='qemu'><name>%s</name><uuid>%s</uuid><devices>", in.Name, uuid)
	for _, d := range in.Disks {
		if slices.Contains(drop, d.Name) {
			continue
		}
		slot := strings.TrimPrefix(d.Address, "0000:00:")
		slot = strings.TrimSuffix(slot, ".0")
		fmt.Fprintf(&b, "<disk type='file' device='disk'><target dev='%s' bus='virtio'/><serial>%s</serial>"+
			"<address type='pci' domain='0x0000' bus='0x00' slot='0x%s' function='0x0'/></disk>", d.Name, d.Serial, slot)
	}
	for _, n := range in.NICs {
		if slices.Contains(drop, n.MAC) {
			continue
		}
		slot := strings.TrimSuffix(strings.TrimPrefix(n.Address, "0000:00:"), ".0")
		fmt.Fprintf(&b, "<interface type='network'><mac address='%s'/><source network='default'/>"+
			"<address type='pci' domain='0x0000' bus='0x00' slot='0x%s' function='0x0'/></interface>", n.MAC, slot)
	}
	b.WriteString("</devices></domain>")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.docs[in.Name] = []byte(b.String())
	f.states[in.Name] = st
}

func (f *fakeLibvirt) undefine(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.docs, name)
}

// fakeDisks is the disks part.
type fakeDisks struct {
	mu        sync.Mutex
	undefined []string
	sweeps    int
}

func (f *fakeDisks) UndefineSecrets(_ context.Context, uuid string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.undefined = append(f.undefined, uuid)
	return nil
}

func (f *fakeDisks) Sweep(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sweeps++
	return nil
}

type env struct {
	core  *fakeCore
	virt  *fakeLibvirt
	disks *fakeDisks
	log   *testenv.SyncBuffer // shared with the watcher's goroutine
	r     *reconcile.Reconciler
}

func newEnv(t *testing.T, opts reconcile.Options) *env {
	t.Helper()
	e := &env{core: newFakeCore(), virt: newFakeLibvirt(), disks: &fakeDisks{}, log: &testenv.SyncBuffer{}}
	opts.Domains, opts.Disks = e.virt, e.disks
	opts.Logger = slog.New(slog.NewTextHandler(e.log, nil))
	if opts.Interval == 0 {
		opts.Interval = -1
	}
	e.r = reconcile.New(e.core, opts)
	return e
}

const uuidA = "6f1c1a2e-3d4b-4c5d-8e9f-0a1b2c3d4e5f"

// instance is app-1 as libvirt placed it: two disks and a NIC.
func instance() *model.Instance {
	return &model.Instance{Name: "app-1", UUID: uuidA,
		Disks: []model.Disk{{Name: "vda", Address: "0000:00:05.0", Serial: "root-1"}, {Name: "vdb", Address: "0000:00:06.0", Serial: "data-1"}},
		NICs:  []model.NIC{{MAC: "52:54:00:00:00:01", Bus: "pci", Address: "0000:00:03.0"}}}
}

// TestReconcileInstance: what one pass does to an instance for each
// thing libvirt can say of its domain.
func TestReconcileInstance(t *testing.T) {
	moved := instance()
	moved.Disks[1].Address = "0000:00:09.0"
	for _, tc := range []struct {
		name  string
		setup func(e *env)
		// What the pass must have done.
		missing       bool
		undefined     bool // the disks' secrets left libvirt
		stopped       bool // the parts were told the domain stopped
		republished   *model.Instance
		log, noLogHas string
	}{
		{name: "in line", setup: func(e *env) { e.virt.define(instance(), uuidA, virt.StateRunning) },
			noLogHas: "republished"},
		{name: "disk removed outside hostctl", setup: func(e *env) { e.virt.define(instance(), uuidA, virt.StateRunning, "vdb") },
			republished: &model.Instance{Name: "app-1", UUID: uuidA, Disks: instance().Disks[:1], NICs: instance().NICs},
			log:         "devices removed outside hostctl; dropped from the metadata"},
		{name: "NIC removed outside hostctl", setup: func(e *env) { e.virt.define(instance(), uuidA, virt.StateRunning, "52:54:00:00:00:01") },
			republished: &model.Instance{Name: "app-1", UUID: uuidA, Disks: instance().Disks},
			log:         "NIC 52:54:00:00:00:01"},
		{name: "address changed", setup: func(e *env) { e.virt.define(moved, uuidA, virt.StateRunning) },
			republished: moved, log: "device addresses changed outside hostctl; metadata republished"},
		{name: "a part drifted", setup: func(e *env) {
			e.virt.define(instance(), uuidA, virt.StateRunning)
			e.core.drift = "firmware entries did not match --firmware-metadata (off)"
		}, republished: instance(), log: "firmware entries did not match --firmware-metadata (off); republished"},
		{name: "domain gone", setup: func(*env) {}, missing: true, undefined: true,
			log: "instance marked missing: libvirt has no domain with its name and uuid"},
		{name: "another domain of its name", setup: func(e *env) { e.virt.define(instance(), "00000000-0000-4000-8000-000000000000", virt.StateRunning) },
			missing: true, undefined: true, log: "instance marked missing"},
		{name: "powered off by the guest", setup: func(e *env) { e.virt.define(instance(), uuidA, virt.StateShutoff) },
			undefined: true, stopped: true, noLogHas: "republished"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, reconcile.Options{})
			e.core.add(instance())
			tc.setup(e)
			if err := e.r.Reconcile(t.Context()); err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			if got := e.r.Missing("app-1"); got != tc.missing {
				t.Errorf("missing = %v, want %v", got, tc.missing)
			}
			if got := slices.Contains(e.disks.undefined, uuidA); got != tc.undefined {
				t.Errorf("secrets undefined = %v (%v), want %v", got, e.disks.undefined, tc.undefined)
			}
			if got := slices.Contains(e.core.stopped, "app-1"); got != tc.stopped {
				t.Errorf("parts told stopped = %v, want %v", got, tc.stopped)
			}
			got := e.core.republished["app-1"]
			switch {
			case tc.republished == nil && got != nil:
				t.Errorf("republished %+v, want nothing", got)
			case tc.republished != nil && (got == nil || !equalJSON(got, tc.republished)):
				t.Errorf("republished %+v\nwant %+v", got, tc.republished)
			}
			if e.disks.sweeps != 1 {
				t.Errorf("%d sweeps, want 1", e.disks.sweeps)
			}
			if e.core.holding != 0 {
				t.Errorf("%d holds not released", e.core.holding)
			}
			if log := e.log.String(); !strings.Contains(log, tc.log) || tc.noLogHas != "" && strings.Contains(log, tc.noLogHas) {
				t.Errorf("log %q: want %q, not %q", log, tc.log, tc.noLogHas)
			}
		})
	}
}

func equalJSON(a, b *model.Instance) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && bytes.Equal(ja, jb)
}

// TestReconcileLeavesAlone: an instance a state holds (shelved, rescued),
// another host's or one deleted is not looked up in libvirt at all.
func TestReconcileLeavesAlone(t *testing.T) {
	e := newEnv(t, reconcile.Options{})
	e.core.add(instance())
	e.core.stateHeld["app-1"] = true
	if err := e.r.Reconcile(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(e.virt.asked) != 0 || len(e.disks.undefined) != 0 || e.r.Missing("app-1") || e.core.holding != 0 {
		t.Errorf("held instance: libvirt asked %v, secrets undefined %v, missing %v, %d holds", e.virt.asked, e.disks.undefined, e.r.Missing("app-1"), e.core.holding)
	}
}

// TestReconcileErrors: libvirtd unreachable ends the pass (the reconnect
// brings another) but the sweep runs; a failed republish is the pass's
// error, naming the instance; nothing is marked missing for either.
func TestReconcileErrors(t *testing.T) {
	t.Run("unreachable", func(t *testing.T) {
		e := newEnv(t, reconcile.Options{})
		for _, n := range []string{"a-1", "a-2"} {
			in := instance()
			in.Name = n
			e.core.add(in)
		}
		e.virt.xmlErr["a-1"] = fmt.Errorf("domain a-1: %w", virt.ErrUnreachable)
		err := e.r.Reconcile(t.Context())
		if !errors.Is(err, virt.ErrUnreachable) || !strings.Contains(err.Error(), "reconcile a-1") {
			t.Errorf("reconcile = %v, want ErrUnreachable naming a-1", err)
		}
		if !slices.Equal(e.virt.asked, []string{"a-1"}) || e.disks.sweeps != 1 || e.r.Missing("a-1") {
			t.Errorf("asked %v, %d sweeps, missing %v; want a-1 only, one sweep, not missing", e.virt.asked, e.disks.sweeps, e.r.Missing("a-1"))
		}
	})
	t.Run("republish fails", func(t *testing.T) {
		e := newEnv(t, reconcile.Options{})
		e.core.add(instance())
		e.core.republishErr = errInjected
		e.virt.define(instance(), uuidA, virt.StateRunning, "vdb")
		if err := e.r.Reconcile(t.Context()); !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "reconcile app-1") {
			t.Errorf("reconcile = %v, want the republish's error naming app-1", err)
		}
		if e.core.holding != 0 {
			t.Errorf("%d holds not released", e.core.holding)
		}
	})
}

// TestMissingTransitions: an instance is marked missing once; its
// domain's return clears the mark, and so does the first pass after the
// instance is deleted.
func TestMissingTransitions(t *testing.T) {
	e := newEnv(t, reconcile.Options{})
	e.core.add(instance())
	pass := func(want bool) {
		t.Helper()
		if err := e.r.Reconcile(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := e.r.Missing("app-1"); got != want {
			t.Fatalf("missing = %v, want %v", got, want)
		}
	}
	pass(true)
	pass(true)
	if n := strings.Count(e.log.String(), "instance marked missing"); n != 1 {
		t.Errorf("marked missing logged %d times, want once:\n%s", n, e.log)
	}
	e.virt.define(instance(), uuidA, virt.StateRunning)
	pass(false)
	if !strings.Contains(e.log.String(), "instance's domain is back") {
		t.Errorf("no \"domain is back\" in the log:\n%s", e.log)
	}
	e.virt.undefine("app-1")
	pass(true)
	e.core.mu.Lock()
	delete(e.core.recs, "app-1")
	e.core.mu.Unlock()
	pass(false)
}

// TestWatch: a pass over every instance at the start, then one instance
// per domain event, every instance after a reconnect; Reconciled after
// each pass; Close stops the watcher.
func TestWatch(t *testing.T) {
	passes := make(chan struct{}, 16)
	e := newEnv(t, reconcile.Options{Reconciled: func() { passes <- struct{}{} }})
	e.virt.events = make(chan virt.Event)
	defer close(e.virt.events)
	for _, n := range []string{"a-1", "a-2"} {
		in := instance()
		in.Name = n
		e.core.add(in)
		e.virt.define(in, uuidA, virt.StateRunning)
	}
	held := func() []string {
		e.core.mu.Lock()
		defer e.core.mu.Unlock()
		h := slices.Clone(e.core.held)
		e.core.held = nil
		return h
	}
	e.r.Start()
	defer e.r.Close()
	<-passes
	if h := held(); !slices.Equal(h, []string{"a-1", "a-2"}) {
		t.Errorf("first pass held %v, want every instance", h)
	}
	e.virt.undefine("a-2")
	e.virt.events <- virt.Event{Kind: virt.EventUndefined, Domain: "a-2"}
	<-passes
	if h := held(); !slices.Equal(h, []string{"a-2"}) || !e.r.Missing("a-2") {
		t.Errorf("domain event: held %v, missing %v; want a-2 alone, marked missing", h, e.r.Missing("a-2"))
	}
	e.virt.events <- virt.Event{Kind: virt.EventDisconnected}
	<-passes // a pass of no instance: nothing was pending
	if h := held(); len(h) != 0 {
		t.Errorf("disconnect: held %v, want none", h)
	}
	e.virt.events <- virt.Event{Kind: virt.EventReconnected}
	<-passes
	if h := held(); !slices.Equal(h, []string{"a-1", "a-2"}) {
		t.Errorf("reconnect: held %v, want every instance", h)
	}
	// An event of a deleted instance's domain drops its mark.
	e.core.mu.Lock()
	delete(e.core.recs, "a-2")
	e.core.mu.Unlock()
	e.virt.events <- virt.Event{Kind: virt.EventUndefined, Domain: "a-2"}
	<-passes
	if h := held(); !slices.Equal(h, []string{"a-2"}) || e.r.Missing("a-2") {
		t.Errorf("deleted instance's event: held %v, missing %v; want a-2, no longer missing", h, e.r.Missing("a-2"))
	}
	if log := e.log.String(); !strings.Contains(log, "libvirtd connection lost") || !strings.Contains(log, "libvirtd connection back") {
		t.Errorf("log: %s", log)
	}
}
