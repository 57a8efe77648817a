package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// The real parts fill the roles EvacHost needs.
var (
	_ EvacCore  = (*controller.Controller)(nil)
	_ EvacDisks = (*disks.Part)(nil)
)

// evacWorld is two hosts, "a" (down, the instance's) and "b" (the new
// host), over one real store: what each has of the instance "vm", kept
// by fakes as idempotent as EvacHost must be.
type evacWorld struct {
	t  *testing.T
	mu sync.Mutex
	st Records

	owner    string
	revision int64
	aDown    bool
	// per host: domain defined, running, files, libvirt secrets, device
	// claimed, device burned (a burned device stays burned).
	domain, running, files, lvSecrets, claimed, burned map[string]bool
	// blockdev: the secrets the block-device record names; wrap: each
	// key-manager secret and the host whose key wraps it.
	blockdev []string
	wrap     map[string]string
	noImage  bool
	newID    int
	fail     map[string]int
	calls    map[string]int
}

func newEvacWorld(t *testing.T) *evacWorld {
	return &evacWorld{t: t, st: stores.Bolt(t), owner: "a", revision: 1, aDown: true,
		domain: map[string]bool{"a": true}, running: map[string]bool{"a": true}, files: map[string]bool{"a": true},
		lvSecrets: map[string]bool{"a": true}, claimed: map[string]bool{"a": true}, burned: map[string]bool{"a": true},
		blockdev: []string{"s1", "s2"}, wrap: map[string]string{"s1": "a", "s2": "a"},
		fail: map[string]int{}, calls: map[string]int{}}
}

func (w *evacWorld) call(name string) error {
	w.calls[name]++
	if n, ok := w.fail[name]; ok && n == w.calls[name] {
		delete(w.fail, name)
		return fmt.Errorf("injected failure of %s", name)
	}
	return nil
}

func (w *evacWorld) state() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "owner=%s", w.owner)
	for _, h := range []string{"a", "b"} {
		fmt.Fprintf(&b, " %s:[domain=%t running=%t files=%t lvsecrets=%t claimed=%t burned=%t]", h,
			w.domain[h], w.running[h], w.files[h], w.lvSecrets[h], w.claimed[h], w.burned[h])
	}
	fmt.Fprintf(&b, " blockdev=%s secrets=", strings.Join(w.blockdev, ","))
	for i, id := range slices.Sorted(maps.Keys(w.wrap)) {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%s@%s", id, w.wrap[id])
	}
	return b.String()
}

// The ends of an evacuation: untouched (refused), evacuated (rebuilt on
// b, a's copy as a left it: a is down) and cleaned (a came back: its copy
// and its secrets gone, its device burned still).
const (
	evUntouched = "owner=a a:[domain=true running=true files=true lvsecrets=true claimed=true burned=true] b:[domain=false running=false files=false lvsecrets=false claimed=false burned=false] blockdev=s1,s2 secrets=s1@a,s2@a"
	evEvacuated = "owner=b a:[domain=true running=true files=true lvsecrets=true claimed=true burned=true] b:[domain=true running=true files=true lvsecrets=true claimed=true burned=true] blockdev=n1 secrets=n1@b,s1@a,s2@a"
	evCleaned   = "owner=b a:[domain=false running=false files=false lvsecrets=false claimed=false burned=true] b:[domain=true running=true files=true lvsecrets=true claimed=true burned=true] blockdev=n1 secrets=n1@b"
)

// evacuator is host's Evacuator over the world (a new one: a restarted
// hostctl).
func (w *evacWorld) evacuator(host string) *Evacuator {
	return &Evacuator{Store: w.st, Host: host, Dest: &fakeEvacHost{w, host}, Source: &fakeEvacHost{w, host}, Log: slog.New(slog.DiscardHandler)}
}

type fakeEvacHost struct {
	w    *evacWorld
	name string
}

func (f *fakeEvacHost) Instance(ctx context.Context, name string) (store.Instance, error) {
	w := f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if name != "vm" {
		return store.Instance{}, fmt.Errorf("instance %s: %w", name, store.ErrNotFound)
	}
	spec, _ := json.Marshal(map[string]string{"name": "vm", "uuid": uuid})
	return store.Instance{Name: "vm", UUID: uuid, Host: w.owner, Spec: spec, Revision: w.revision}, nil
}

func (f *fakeEvacHost) CheckEvacuate(ctx context.Context, rec store.Instance) error {
	w := f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case rec.Host == f.name:
		return fmt.Errorf("%w: lives here", ErrInvalid)
	case !w.aDown:
		return fmt.Errorf("%w: %s lives on a, whose heartbeat is fresh", controller.ErrOwnerAlive, rec.Name)
	case w.domain[f.name]:
		return fmt.Errorf("%w: a domain named vm already", ErrState)
	case w.noImage:
		return errkind.Errorf(errkind.Conflict, "image cirros: not found")
	}
	return nil
}

func (f *fakeEvacHost) SourceDown(ctx context.Context, rec Evacuation) error {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if !f.w.aDown {
		return fmt.Errorf("%w: a is alive", controller.ErrOwnerAlive)
	}
	return nil
}

func (f *fakeEvacHost) TakeOver(ctx context.Context, rec Evacuation) error {
	w := f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.call("takeover"); err != nil {
		return err
	}
	switch w.owner {
	case f.name:
		return nil
	case rec.Source:
		w.owner = f.name
		w.revision++
		return nil
	}
	return fmt.Errorf("%w: lives on %s", store.ErrConflict, w.owner)
}

func (f *fakeEvacHost) OldSecrets(ctx context.Context, _ string) ([]string, error) {
	w := f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.call("oldsecrets"); err != nil {
		return nil, err
	}
	return slices.Clone(w.blockdev), nil
}

func (f *fakeEvacHost) ReleaseDisks(ctx context.Context, rec Evacuation) error {
	w := f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.call("releasedisks"); err != nil {
		return err
	}
	w.blockdev = nil
	return nil
}

func (f *fakeEvacHost) Rebuild(ctx context.Context, rec Evacuation) error {
	w, h := f.w, f.name
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.owner != h {
		return fmt.Errorf("%w: not this host's", ErrState)
	}
	// What an earlier attempt left goes first (its secrets with it).
	for _, id := range w.blockdev {
		delete(w.wrap, id)
	}
	w.blockdev, w.domain[h], w.files[h] = nil, false, false
	w.claimed[h], w.burned[h] = true, true // a new device, burned at once
	w.files[h] = true
	if err := w.call("rebuild"); err != nil {
		return err // half-way: files made, no domain
	}
	w.newID++
	id := fmt.Sprintf("n%d", w.newID)
	w.wrap[id], w.blockdev = h, []string{id}
	w.domain[h] = true
	return nil
}

func (f *fakeEvacHost) Boot(ctx context.Context, rec Evacuation) error {
	w, h := f.w, f.name
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.call("boot"); err != nil {
		return err
	}
	w.running[h], w.lvSecrets[h] = true, true
	return nil
}

func (f *fakeEvacHost) Reclaim(ctx context.Context, rec Evacuation) (bool, error) {
	w := f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.owner != f.name {
		return false, nil
	}
	w.revision++
	return true, nil
}

func (f *fakeEvacHost) RemoveLocal(ctx context.Context, rec Evacuation) error {
	w, h := f.w, f.name
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.owner == h {
		return fmt.Errorf("%w: lives here", ErrState)
	}
	if err := w.call("removelocal"); err != nil {
		return err
	}
	w.domain[h], w.running[h], w.files[h], w.lvSecrets[h] = false, false, false, false
	return nil
}

func (f *fakeEvacHost) DeleteSecrets(ctx context.Context, rec Evacuation) error {
	w := f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.call("deletesecrets"); err != nil {
		return err
	}
	for _, id := range rec.OldSecrets {
		if w.wrap[id] == f.name {
			delete(w.wrap, id)
		}
	}
	return nil
}

func (f *fakeEvacHost) Release(ctx context.Context, rec Evacuation) error {
	w := f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.call("release"); err != nil {
		return err
	}
	w.claimed[f.name] = false // a burned device stays burned
	return nil
}

// comeBack is host a's hostctl starting again: its heartbeat fresh, its
// sweep run.
func (w *evacWorld) comeBack(t *testing.T) error {
	t.Helper()
	w.mu.Lock()
	w.aDown = false
	w.mu.Unlock()
	return w.evacuator("a").Sweep(context.Background())
}

func (w *evacWorld) records(t *testing.T) []Evacuation {
	t.Helper()
	recs, err := Evacuations(context.Background(), w.st, "")
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestEvacuateAndOldHostCleansUp(t *testing.T) {
	ctx := context.Background()
	w := newEvacWorld(t)
	rec, err := w.evacuator("b").Evacuate(ctx, "vm", "b")
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != Evacuated || rec.Step != "started" || !slices.Equal(rec.OldSecrets, []string{"s1", "s2"}) {
		t.Fatalf("evacuation: %s/%s old secrets %v; want evacuated/started [s1 s2]", rec.State, rec.Step, rec.OldSecrets)
	}
	if got := w.state(); got != evEvacuated {
		t.Fatalf("after evacuate:\n got %s\nwant %s", got, evEvacuated)
	}
	// The record stays for a; b sweeping finds nothing of its own.
	if err := w.evacuator("b").Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(w.records(t)); n != 1 {
		t.Fatalf("%d evacuation records before a comes back, want 1", n)
	}
	if err := w.comeBack(t); err != nil {
		t.Fatal(err)
	}
	if got := w.state(); got != evCleaned {
		t.Fatalf("after a came back:\n got %s\nwant %s", got, evCleaned)
	}
	if recs := w.records(t); len(recs) != 0 {
		t.Fatalf("evacuation records after the clean-up: %+v", recs)
	}
	// A second sweep does nothing.
	if err := w.comeBack(t); err != nil || w.state() != evCleaned {
		t.Fatalf("second sweep: %v, %s", err, w.state())
	}
}

// TestEvacuateRefusals: each bad request is refused with its kind and
// changes nothing (no record, nothing of the instance).
func TestEvacuateRefusals(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name, inst, dest string
		setup            func(*evacWorld)
		kind             error
		says             string
	}{
		{"no host", "vm", "", nil, ErrInvalid, "host: required"},
		{"another host", "vm", "c", nil, ErrInvalid, `host "c": is not this host`},
		{"unknown instance", "nope", "b", nil, store.ErrNotFound, "nope"},
		{"owner alive", "vm", "b", func(w *evacWorld) { w.aDown = false }, controller.ErrOwnerAlive, "heartbeat is fresh"},
		{"own instance", "vm", "b", func(w *evacWorld) { w.owner = "b" }, ErrInvalid, "lives here"},
		{"domain exists here", "vm", "b", func(w *evacWorld) { w.domain["b"] = true }, ErrState, "a domain named vm"},
		{"image missing here", "vm", "b", func(w *evacWorld) { w.noImage = true }, errkind.Conflict, "image cirros: not found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newEvacWorld(t)
			if c.setup != nil {
				c.setup(w)
			}
			before := w.state()
			_, err := w.evacuator("b").Evacuate(ctx, c.inst, c.dest)
			if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("err = %v; want %v saying %q", err, c.kind, c.says)
			}
			if got := w.state(); got != before {
				t.Fatalf("a refused evacuation changed things:\n got %s\nwant %s", got, before)
			}
			if recs := w.records(t); len(recs) != 0 {
				t.Fatalf("a refused evacuation left records: %+v", recs)
			}
		})
	}
}

// TestEvacuateCrashMatrix: a crash of the new host's hostctl right after
// each step's record (and a failure of each step's work) ends, after a
// restart and the same request again, evacuated; then the old host's
// clean-up, crashed after each of its steps and run again, ends cleaned.
func TestEvacuateCrashMatrix(t *testing.T) {
	ctx := context.Background()
	crash := errors.New("crash")
	for _, step := range EvacuateSteps {
		t.Run("dest-after-"+step, func(t *testing.T) {
			w := newEvacWorld(t)
			e := w.evacuator("b")
			e.hook = func(s string) error {
				if s == step {
					return crash
				}
				return nil
			}
			if _, err := e.Evacuate(ctx, "vm", "b"); !errors.Is(err, crash) {
				t.Fatalf("err = %v, want the crash", err)
			}
			if step != "started" {
				st, err := NewEvacuationPart(w.st, nil).State(ctx, uuid)
				if err != nil || st != Evacuating {
					t.Fatalf("state after a crash at %s: %q, %v; want evacuating", step, st, err)
				}
			}
			rec, err := w.evacuator("b").Evacuate(ctx, "vm", "b")
			if step == "started" {
				// The last step's record said evacuated: nothing to resume,
				// and a new evacuation of b's own instance is refused.
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("evacuate again after the end: %v, want ErrInvalid", err)
				}
			} else if err != nil || rec.State != Evacuated {
				t.Fatalf("resume after a crash at %s: %s, %v", step, rec.State, err)
			}
			if got := w.state(); got != evEvacuated {
				t.Fatalf("after a crash at %s and the resume:\n got %s\nwant %s", step, got, evEvacuated)
			}
			if err := w.comeBack(t); err != nil || w.state() != evCleaned {
				t.Fatalf("clean-up: %v\n got %s\nwant %s", err, w.state(), evCleaned)
			}
			t.Logf("crash matrix: new host, after %-15s -> evacuate again: evacuated on b; a back: cleaned (a's device burned)", step)
		})
	}
	t.Run("dest-fails-boot", func(t *testing.T) {
		// The instance is rebuilt and b's: the evacuation is over, the
		// start is any start's to retry; a comes back and cleans up.
		w := newEvacWorld(t)
		w.fail["boot"] = 1
		rec, err := w.evacuator("b").Evacuate(ctx, "vm", "b")
		if err == nil || !strings.Contains(err.Error(), "its start failed") || rec.State != Evacuated || !strings.HasPrefix(rec.Error, "start: ") {
			t.Fatalf("boot failure: %+v, %v", rec, err)
		}
		if st, _ := NewEvacuationPart(w.st, nil).State(ctx, uuid); st != "" {
			t.Fatalf("state after a failed start: %q, want none (the instance may be started)", st)
		}
		if err := w.comeBack(t); err != nil {
			t.Fatal(err)
		}
		if got, want := w.state(), strings.Replace(evCleaned, "b:[domain=true running=true files=true lvsecrets=true", "b:[domain=true running=false files=true lvsecrets=false", 1); got != want {
			t.Fatalf("got %s\nwant %s", got, want)
		}
	})
	for _, fail := range []string{"takeover", "oldsecrets", "releasedisks", "rebuild"} {
		t.Run("dest-fails-"+fail, func(t *testing.T) {
			w := newEvacWorld(t)
			w.fail[fail] = 1
			if _, err := w.evacuator("b").Evacuate(ctx, "vm", "b"); err == nil || !strings.Contains(err.Error(), "resumes it") {
				t.Fatalf("err = %v, want the failure naming the resume", err)
			}
			if _, err := w.evacuator("b").Evacuate(ctx, "vm", "b"); err != nil {
				t.Fatal(err)
			}
			if got := w.state(); got != evEvacuated {
				t.Fatalf("after %s failed once:\n got %s\nwant %s", fail, got, evEvacuated)
			}
		})
	}
	for _, step := range SweepSteps {
		t.Run("source-after-"+step, func(t *testing.T) {
			w := newEvacWorld(t)
			if _, err := w.evacuator("b").Evacuate(ctx, "vm", "b"); err != nil {
				t.Fatal(err)
			}
			w.aDown = false
			e := w.evacuator("a")
			e.hook = func(s string) error {
				if s == step {
					return crash
				}
				return nil
			}
			if err := e.Sweep(ctx); !errors.Is(err, crash) {
				t.Fatalf("err = %v, want the crash", err)
			}
			if err := w.evacuator("a").Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			if got := w.state(); got != evCleaned {
				t.Fatalf("after a crash at %s and a sweep again:\n got %s\nwant %s", step, got, evCleaned)
			}
			if recs := w.records(t); len(recs) != 0 {
				t.Fatalf("records left: %+v", recs)
			}
			t.Logf("crash matrix: old host, after %-15s -> sweep again: cleaned", step)
		})
	}
	for _, fail := range []string{"removelocal", "deletesecrets", "release"} {
		t.Run("source-fails-"+fail, func(t *testing.T) {
			w := newEvacWorld(t)
			if _, err := w.evacuator("b").Evacuate(ctx, "vm", "b"); err != nil {
				t.Fatal(err)
			}
			w.fail[fail] = 1
			if err := w.comeBack(t); err == nil {
				t.Fatal("the failing sweep succeeded")
			}
			if err := w.comeBack(t); err != nil || w.state() != evCleaned {
				t.Fatalf("sweep again: %v\n got %s\nwant %s", err, w.state(), evCleaned)
			}
		})
	}
}

// TestEvacuateOldHostBackEarly: the old host comes back while the
// evacuation has not taken its instance over: the evacuation is
// cancelled and the instance stays the old host's, whole; the new host's
// resume then refuses (the owner is alive). Once the takeover happened,
// the old host's copy goes at once and its secrets once the evacuation
// ended.
func TestEvacuateOldHostBackEarly(t *testing.T) {
	ctx := context.Background()
	crash := errors.New("crash")
	t.Run("before takeover", func(t *testing.T) {
		w := newEvacWorld(t)
		e := w.evacuator("b")
		e.hook = func(s string) error {
			if s == "recorded" {
				return crash
			}
			return nil
		}
		if _, err := e.Evacuate(ctx, "vm", "b"); !errors.Is(err, crash) {
			t.Fatal(err)
		}
		if err := w.comeBack(t); err != nil {
			t.Fatal(err)
		}
		if got := w.state(); got != evUntouched {
			t.Fatalf("after a came back:\n got %s\nwant %s", got, evUntouched)
		}
		if recs := w.records(t); len(recs) != 0 {
			t.Fatalf("cancelled evacuation's record stays: %+v", recs)
		}
		if _, err := w.evacuator("b").Evacuate(ctx, "vm", "b"); !errors.Is(err, controller.ErrOwnerAlive) {
			t.Fatalf("evacuate of a live host's instance: %v, want ErrOwnerAlive", err)
		}
	})
	t.Run("after takeover", func(t *testing.T) {
		w := newEvacWorld(t)
		e := w.evacuator("b")
		e.hook = func(s string) error {
			if s == "disks-released" {
				return crash
			}
			return nil
		}
		if _, err := e.Evacuate(ctx, "vm", "b"); !errors.Is(err, crash) {
			t.Fatal(err)
		}
		if err := w.comeBack(t); err != nil {
			t.Fatal(err)
		}
		w.mu.Lock()
		aDomain := w.domain["a"] || w.running["a"]
		w.mu.Unlock()
		if aDomain {
			t.Fatalf("a's copy of an instance b took over still there: %s", w.state())
		}
		if _, err := w.evacuator("b").Evacuate(ctx, "vm", "b"); err != nil {
			t.Fatal(err)
		}
		if err := w.comeBack(t); err != nil || w.state() != evCleaned {
			t.Fatalf("clean-up: %v\n got %s\nwant %s", err, w.state(), evCleaned)
		}
	})
}

// TestEvacuateTwiceAtOnce: a second request while one runs is refused.
func TestEvacuateTwiceAtOnce(t *testing.T) {
	ctx := context.Background()
	w := newEvacWorld(t)
	e := w.evacuator("b")
	var second error
	e.hook = func(s string) error {
		if s == "owner-switched" {
			_, second = e.Evacuate(ctx, "vm", "b")
		}
		return nil
	}
	if _, err := e.Evacuate(ctx, "vm", "b"); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(second, ErrState) || !strings.Contains(second.Error(), "an evacuation of vm is running") {
		t.Fatalf("second evacuation while one runs: %v", second)
	}
	if got := w.state(); got != evEvacuated {
		t.Fatalf("got %s\nwant %s", got, evEvacuated)
	}
}

// TestEvacuationPartRefusesWhileEvacuating: other operations are refused
// while the evacuation runs (naming how to resume it), and allowed once it
// ended.
func TestEvacuationPartRefusesWhileEvacuating(t *testing.T) {
	ctx := context.Background()
	w := newEvacWorld(t)
	e := w.evacuator("b")
	e.hook = func(s string) error {
		if s == "rebuilt" {
			return errors.New("crash")
		}
		return nil
	}
	_, _ = e.Evacuate(ctx, "vm", "b")
	p := NewEvacuationPart(w.st, nil)
	pi := &part.Instance{Spec: &model.Instance{Name: "vm", UUID: uuid}}
	if err := p.Check(ctx, part.Start, pi); !errors.Is(err, part.ErrState) || !strings.Contains(err.Error(), "hostctl instance evacuate vm --to b") {
		t.Fatalf("start while evacuating: %v", err)
	}
	if err := p.Check(ctx, part.Evacuate, pi); err != nil {
		t.Fatalf("evacuate (resume) refused: %v", err)
	}
	if _, err := w.evacuator("b").Evacuate(ctx, "vm", "b"); err != nil {
		t.Fatal(err)
	}
	if err := p.Check(ctx, part.Start, pi); err != nil {
		t.Fatalf("start once evacuated: %v", err)
	}
	if st, _ := p.State(ctx, uuid); st != "" {
		t.Fatalf("state once evacuated: %q", st)
	}
}
