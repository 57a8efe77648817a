package vmstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// memRecords is store.Records in memory, with the versions' rules.
type memRecords struct {
	mu   sync.Mutex
	recs map[string]store.Record
	fail error // every call fails with it when set
}

func newMem() *memRecords { return &memRecords{recs: map[string]store.Record{}} }

func (m *memRecords) Record(_ context.Context, key string) (store.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return store.Record{}, m.fail
	}
	r, ok := m.recs[key]
	if !ok {
		return store.Record{}, fmt.Errorf("record %s: %w", key, store.ErrNotFound)
	}
	return r, nil
}

func (m *memRecords) PutRecord(_ context.Context, key string, value []byte, expect int64) (store.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return store.Record{}, m.fail
	}
	cur, ok := m.recs[key]
	if expect >= 0 && (expect == 0 && ok || expect > 0 && cur.Version != expect) {
		return store.Record{}, fmt.Errorf("record %s: %w", key, store.ErrConflict)
	}
	r := store.Record{Key: key, Value: slices.Clone(value), Version: cur.Version + 1}
	m.recs[key] = r
	return r, nil
}

func (m *memRecords) DeleteRecord(_ context.Context, key string, expect int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	cur, ok := m.recs[key]
	switch {
	case !ok:
		return fmt.Errorf("record %s: %w", key, store.ErrNotFound)
	case expect >= 0 && cur.Version != expect:
		return fmt.Errorf("record %s: %w", key, store.ErrConflict)
	}
	delete(m.recs, key)
	return nil
}

func (m *memRecords) Records(_ context.Context, prefix string) ([]store.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return nil, m.fail
	}
	var out []store.Record
	for _, k := range slices.Sorted(maps.Keys(m.recs)) {
		if strings.HasPrefix(k, prefix) {
			out = append(out, m.recs[k])
		}
	}
	return out, nil
}

// fakeCatalog is an image catalog of names; deleted lists the deletions.
type fakeCatalog struct {
	mu      sync.Mutex
	names   map[string]bool
	deleted []string
}

func (f *fakeCatalog) Get(_ context.Context, name string) (images.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.names[name] {
		return images.Image{}, fmt.Errorf("image %s: %w", name, store.ErrNotFound)
	}
	return images.Image{Name: name}, nil
}

func (f *fakeCatalog) Delete(_ context.Context, name string, _ func(context.Context) ([]string, error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.names[name] {
		return fmt.Errorf("image %s: %w", name, store.ErrNotFound)
	}
	delete(f.names, name)
	f.deleted = append(f.deleted, name)
	return nil
}

// fakeCore records the events and says every domain runs.
type fakeCore struct {
	mu     sync.Mutex
	events []string
}

func (f *fakeCore) Emit(_ context.Context, stream, typ string, payload any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, fmt.Sprintf("%s %s %v", stream, typ, payload))
}

func (*fakeCore) PowerState(context.Context, string, string) string { return "running" }

type fixture struct {
	p    *Part
	mem  *memRecords
	cat  *fakeCatalog
	core *fakeCore
}

func newFixture(host string) *fixture {
	f := &fixture{mem: newMem(), cat: &fakeCatalog{names: map[string]bool{}}, core: &fakeCore{}}
	f.p = New(f.mem, host)
	f.p.Bind(f.cat, f.core, slog.New(slog.DiscardHandler))
	return f
}

const (
	uuidA = "0E8A3C52-8E4B-4A0B-9A51-0C9F1D1E2A01"
	uuidB = "0e8a3c52-8e4b-4a0b-9a51-0c9f1d1e2a02"
)

func inst(name, uuid, host string) *part.Instance {
	return &part.Instance{Spec: &model.Instance{Name: name, UUID: uuid}, Host: host}
}

// put stores st for uuid (committed).
func (f *fixture) put(t *testing.T, uuid string, st Record) {
	t.Helper()
	r := revert.New(slog.New(slog.DiscardHandler), "test")
	if err := f.p.Put(context.Background(), r, uuid, st); err != nil {
		t.Fatal(err)
	}
	r.Success()
}

func TestAnswersEveryOperation(t *testing.T) {
	if m := New(nil, "").Answers().Missing(); len(m) != 0 {
		t.Fatalf("no answer for %v", m)
	}
}

// TestCheckRefusesByState: every operation × every state — refused
// (part.ErrState, naming the state and the way out) or allowed, as
// refuseVMState and RequireState of the core did.
func TestCheckRefusesByState(t *testing.T) {
	f := newFixture("host-a")
	ctx := context.Background()
	f.put(t, uuidA, Record{Instance: "shelved-1", State: Shelved, ShelvedImage: "shelved-1-shelved"})
	f.put(t, uuidB, Record{Instance: "rescued-1", State: Rescue, RescueImage: "rescue-img"})
	f.cat.names["shelved-1-shelved"] = true
	shelvedRefused := "instance state does not allow this: the instance is shelved_offloaded (hostctl instance unshelve shelved-1 first)"
	rescueRefused := "instance state does not allow this: the instance is in rescue (hostctl instance unrescue rescued-1 first)"
	for _, op := range part.Ops() {
		cases := []struct {
			in   *part.Instance
			want string
		}{
			{inst("plain-1", "0e8a3c52-8e4b-4a0b-9a51-0c9f1d1e2a03", "host-a"), ""},
			{inst("shelved-1", strings.ToLower(uuidA), "host-a"), shelvedRefused},
			{inst("rescued-1", uuidB, "host-a"), rescueRefused},
		}
		switch op {
		case part.Delete, part.ForceDelete, part.Adopt, part.ConfirmMigration, part.RevertMigration:
			cases[1].want, cases[2].want = "", ""
		case part.Unshelve:
			cases[0].want = "instance state does not allow this: the instance is not shelved (state running)"
			cases[1].want = ""
			cases[2].want = "instance state does not allow this: the instance is not shelved (state rescue)"
		case part.Unrescue:
			cases[0].want = "instance state does not allow this: the instance is not in rescue (state running)"
			cases[1].want = "instance state does not allow this: the instance is not in rescue (state shelved_offloaded)"
			cases[2].want = ""
		}
		for _, c := range cases {
			err := f.p.Check(ctx, op, c.in)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("%s of %s = %v, want allowed", op, c.in.Spec.Name, err)
			case c.want != "" && (!errors.Is(err, part.ErrState) || err.Error() != c.want):
				t.Errorf("%s of %s = %v, want %q (part.ErrState)", op, c.in.Spec.Name, err, c.want)
			}
			if ans := f.p.Answers()[op]; c.want != "" && ans.Do == part.Nothing {
				t.Errorf("%s refuses %s but answers Nothing (the core would not ask)", op, c.in.Spec.Name)
			}
		}
	}
	// An apply is refused before anything of it is done.
	if err := f.p.Complete(ctx, part.Apply, inst("shelved-1", uuidA, ""), nil); !errors.Is(err, part.ErrState) || err.Error() != shelvedRefused {
		t.Errorf("Complete of an apply of a shelved instance = %v", err)
	}
	if err := f.p.Complete(ctx, part.Apply, inst("new-1", "", ""), nil); err != nil {
		t.Errorf("Complete of an apply of a new instance = %v", err)
	}
	// A store that fails: the check fails, naming the instance.
	f.mem.fail = errors.New("store down")
	if err := f.p.Check(ctx, part.Start, inst("shelved-1", uuidA, "")); err == nil || !strings.Contains(err.Error(), "store down") {
		t.Errorf("Check with the store down = %v", err)
	}
}

// TestAdopt: a shelved instance is adopted only where its image is
// (refused naming the image and its old host); a rescued one leaves the
// rescue (its record goes once the adopt stands).
func TestAdopt(t *testing.T) {
	f := newFixture("host-b")
	ctx := context.Background()
	f.put(t, uuidA, Record{Instance: "vm1", State: Shelved, ShelvedImage: "vm1-shelved"})
	f.put(t, uuidB, Record{Instance: "vm2", State: Rescue, RescueImage: "rescue-img"})
	err := f.p.Check(ctx, part.Adopt, inst("vm1", uuidA, "host-a"))
	if !errors.Is(err, part.ErrState) || !strings.Contains(err.Error(), "image vm1-shelved of host host-a's catalog") {
		t.Fatalf("adopt of a shelved instance without its image = %v", err)
	}
	f.cat.names["vm1-shelved"] = true
	if err := f.p.Check(ctx, part.Adopt, inst("vm1", uuidA, "host-a")); err != nil {
		t.Fatalf("adopt of a shelved instance with its image = %v", err)
	}
	if notes := f.p.Committed(ctx, part.Adopt, inst("vm1", uuidA, "host-b")); len(notes) != 0 {
		t.Errorf("adopt of a shelved instance: notes %q", notes)
	}
	if st, _ := f.p.State(ctx, uuidA); st != Shelved {
		t.Errorf("adopted shelved instance: state %q, want %s", st, Shelved)
	}
	if err := f.p.Check(ctx, part.Adopt, inst("vm2", uuidB, "host-a")); err != nil {
		t.Fatalf("adopt of a rescued instance = %v", err)
	}
	if notes := f.p.Committed(ctx, part.Adopt, inst("vm2", uuidB, "host-b")); len(notes) != 0 {
		t.Errorf("adopt of a rescued instance: notes %q", notes)
	}
	if st, _ := f.p.State(ctx, uuidB); st != "" {
		t.Errorf("adopted rescued instance: state %q, want none", st)
	}
	// Without a catalog bound, a shelved instance is not adopted blind.
	if err := New(f.mem, "host-b").Check(ctx, part.Adopt, inst("vm1", uuidA, "host-a")); !errors.Is(err, part.ErrState) {
		t.Errorf("adopt without a catalog = %v", err)
	}
}

// TestForceDelete: the state record goes; the notes name what stays on
// the dead host. AfterDelete of another host's instance leaves this
// host's catalog alone.
func TestForceDelete(t *testing.T) {
	f := newFixture("host-c")
	ctx := context.Background()
	f.put(t, uuidA, Record{Instance: "vm1", State: Shelved, ShelvedImage: "vm1-shelved"})
	f.put(t, uuidB, Record{Instance: "vm2", State: Rescue, RescueImage: "rescue-img"})
	f.cat.names["vm1-shelved"] = true
	for _, c := range []struct {
		in   *part.Instance
		want string
	}{
		{inst("vm1", uuidA, "host-b"), "the shelved image vm1-shelved in host host-b's image catalog (delete it there: hostctl image delete vm1-shelved)"},
		{inst("vm2", uuidB, "host-b"), "the rescue domain of vm2 and its rescue disk on host host-b"},
		{inst("vm3", "0e8a3c52-8e4b-4a0b-9a51-0c9f1d1e2a03", "host-b"), ""},
	} {
		if err := f.p.AfterDelete(ctx, c.in); err != nil {
			t.Errorf("AfterDelete of %s = %v", c.in.Spec.Name, err)
		}
		notes := f.p.Committed(ctx, part.ForceDelete, c.in)
		if got := strings.Join(notes, "\n"); got != c.want {
			t.Errorf("force delete of %s: notes %q, want %q", c.in.Spec.Name, got, c.want)
		}
		if st, _ := f.p.State(ctx, c.in.Spec.UUID); st != "" {
			t.Errorf("state of %s after a force delete: %q", c.in.Spec.Name, st)
		}
	}
	if len(f.cat.deleted) != 0 || !f.cat.names["vm1-shelved"] {
		t.Errorf("a force delete deleted %v from this host's catalog", f.cat.deleted)
	}
	// A record that cannot be read is named.
	f.mem.fail = errors.New("store down")
	if notes := f.p.Committed(ctx, part.ForceDelete, inst("vm1", uuidA, "host-b")); len(notes) != 1 || !strings.Contains(notes[0], "not read") {
		t.Errorf("force delete with the store down: notes %q", notes)
	}
}

// TestDelete: deleting this host's shelved instance deletes its image
// (an image.deleted event) and its state record.
func TestDelete(t *testing.T) {
	f := newFixture("host-a")
	ctx := context.Background()
	f.put(t, uuidA, Record{Instance: "vm1", State: Shelved, ShelvedImage: "vm1-shelved"})
	f.cat.names["vm1-shelved"] = true
	for _, host := range []string{"host-a", ""} { // "" : hosts not tracked
		if err := f.p.AfterDelete(ctx, inst("vm1", uuidA, host)); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(f.cat.deleted, []string{"vm1-shelved"}) {
		t.Errorf("deleted images %v, want vm1-shelved", f.cat.deleted)
	}
	if want := "images image.deleted map[name:vm1-shelved]"; !slices.Equal(f.core.events, []string{want}) {
		t.Errorf("events %q, want %q", f.core.events, want)
	}
	if st, _ := f.p.State(ctx, uuidA); st != "" {
		t.Errorf("state after delete: %q", st)
	}
}

// TestRecordsUndo: Put and Drop register their undo on the operation's
// revert; Require returns the record and its version.
func TestRecordsUndo(t *testing.T) {
	f := newFixture("host-a")
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	fail := func(f func(r *revert.Reverter) error) {
		t.Helper()
		r := revert.New(log, "test")
		err := f(r)
		if err != nil {
			t.Fatal(err)
		}
		err = errors.New("later step failed")
		r.Fail(&err)
	}
	fail(func(r *revert.Reverter) error {
		return f.p.Put(ctx, r, uuidA, Record{Instance: "vm1", State: Shelved, ShelvedImage: "vm1-shelved"})
	})
	if st, _ := f.p.State(ctx, uuidA); st != "" {
		t.Fatalf("state after a failed shelve: %q", st)
	}
	f.put(t, uuidA, Record{Instance: "vm1", State: Shelved, ShelvedImage: "vm1-shelved"})
	st, ver, err := f.p.Require(ctx, "vm1", uuidA, Shelved)
	if err != nil || st.State != Shelved || st.ShelvedImage != "vm1-shelved" || st.Host != "host-a" || st.Since.IsZero() || ver == 0 {
		t.Fatalf("Require = %+v, %d, %v", st, ver, err)
	}
	if _, _, err := f.p.Require(ctx, "vm1", uuidA, Rescue); !errors.Is(err, part.ErrState) {
		t.Fatalf("Require of rescue of a shelved instance = %v", err)
	}
	fail(func(r *revert.Reverter) error { return f.p.Drop(ctx, r, uuidA, st, ver) })
	if s, _ := f.p.State(ctx, uuidA); s != Shelved {
		t.Fatalf("state after a failed unshelve: %q", s)
	}
	// A second shelve record for the same instance conflicts.
	r := revert.New(log, "test")
	if err := f.p.Put(ctx, r, uuidA, Record{Instance: "vm1", State: Shelved}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second Put = %v", err)
	}
	// Without records, no state is kept.
	none := New(nil, "host-a")
	if s, err := none.State(ctx, uuidA); s != "" || err != nil {
		t.Errorf("State without records = %q, %v", s, err)
	}
	if err := none.Put(ctx, r, uuidA, Record{State: Shelved}); !errors.Is(err, ErrNoRecords) {
		t.Errorf("Put without records = %v", err)
	}
}

// TestUsers: what the states hold of images and secrets (the summaries
// the disks part's secrets' rule reads), and the states by UUID, as the
// core counts them.
func TestUsers(t *testing.T) {
	f := newFixture("host-a")
	ctx := context.Background()
	f.put(t, uuidA, Record{Instance: "vm1", State: Shelved, ShelvedImage: "vm1-shelved"})
	f.put(t, uuidB, Record{Instance: "vm2", State: Rescue, RescueImage: "rescue-img", RescueSecret: "sec-1"})
	states, err := f.p.States(ctx)
	if want := map[string]string{strings.ToLower(uuidA): Shelved, uuidB: Rescue}; err != nil || !maps.Equal(states, want) {
		t.Errorf("States = %v, %v, want %v", states, err, want)
	}
	for image, want := range map[string][]string{"vm1-shelved": {"vm1 (shelved)"}, "rescue-img": {"vm2 (rescue)"}, "other": nil} {
		if got, err := f.p.ImageUsers(ctx, image); err != nil || !slices.Equal(got, want) {
			t.Errorf("ImageUsers(%s) = %q, %v, want %q", image, got, err, want)
		}
	}
	sums, err := f.p.Summaries(ctx)
	want := map[string]Summary{
		strings.ToLower(uuidA): {Instance: "vm1", State: Shelved, ShelvedImage: "vm1-shelved"},
		uuidB:                  {Instance: "vm2", State: Rescue, RescueImage: "rescue-img", RescueSecret: "sec-1"},
	}
	if err != nil || !maps.Equal(sums, want) {
		t.Errorf("Summaries = %v, %v, want %v", sums, err, want)
	}
	// An unreadable record: the listing skips it, the secrets' count
	// refuses (a secret is not deleted on a guess).
	f.mem.recs[KeyPrefix+"bad"] = store.Record{Key: KeyPrefix + "bad", Value: []byte("{"), Version: 1}
	if states, err := f.p.States(ctx); err != nil || len(states) != 2 {
		t.Errorf("States with a bad record = %v, %v", states, err)
	}
	if _, err := f.p.Summaries(ctx); err == nil {
		t.Error("Summaries with a bad record: no error")
	}
}
