package nics

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

var update = flag.Bool("update", false, "rewrite the golden stored formats in testdata")

// memStore is the store as the part uses it, in memory: records with
// versions and compare-and-swap writes, instance records, the address
// index.
type memStore struct {
	mu    sync.Mutex
	recs  map[string]store.Record
	insts []store.Instance
	addrs map[string]string
}

func newMemStore() *memStore {
	return &memStore{recs: map[string]store.Record{}, addrs: map[string]string{}}
}

func (m *memStore) Record(_ context.Context, key string) (store.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.recs[key]
	if !ok {
		return store.Record{}, fmt.Errorf("record %s: %w", key, store.ErrNotFound)
	}
	return r, nil
}

func (m *memStore) PutRecord(_ context.Context, key string, value []byte, expect int64) (store.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.recs[key].Version
	if expect >= 0 && expect != cur {
		return store.Record{}, fmt.Errorf("record %s: %w: version %d, want %d", key, store.ErrConflict, cur, expect)
	}
	r := store.Record{Key: key, Value: value, Version: cur + 1}
	m.recs[key] = r
	return r, nil
}

func (m *memStore) DeleteRecord(_ context.Context, key string, expect int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.recs[key]
	switch {
	case !ok:
		return fmt.Errorf("record %s: %w", key, store.ErrNotFound)
	case expect >= 0 && expect != r.Version:
		return fmt.Errorf("record %s: %w", key, store.ErrConflict)
	}
	delete(m.recs, key)
	return nil
}

func (m *memStore) Records(_ context.Context, prefix string) ([]store.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.Record
	for k, r := range m.recs {
		if strings.HasPrefix(k, prefix) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (m *memStore) Instances(context.Context) ([]store.Instance, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]store.Instance(nil), m.insts...), nil
}

func (m *memStore) LookupAddress(_ context.Context, a string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.addrs[a]
	if !ok {
		return "", store.ErrNotFound
	}
	return u, nil
}

func (m *memStore) Put(_ context.Context, in store.Instance, doc store.Document, _ int64) (store.Instance, store.Document, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.insts = slices.DeleteFunc(m.insts, func(r store.Instance) bool { return r.Name == in.Name })
	m.insts = append(m.insts, in)
	return in, doc, nil
}

func (m *memStore) Delete(_ context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.insts = slices.DeleteFunc(m.insts, func(r store.Instance) bool { return r.Name == name })
	return nil
}

// recorder writes and deletes instance records (the core's publish and
// delete): memStore, the bolt and redis stores.
type recorder interface {
	Put(ctx context.Context, in store.Instance, doc store.Document, expect int64) (store.Instance, store.Document, error)
	Delete(ctx context.Context, name string) error
}

// putInstance stores in's record, as the core's publish does.
func putInstance(t *testing.T, rs recorder, in *model.Instance) {
	t.Helper()
	spec, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := rs.Put(t.Context(), store.Instance{Name: in.Name, UUID: in.UUID, Spec: spec}, store.Document{InstanceUUID: in.UUID, Tree: []byte("{}")}, -1); err != nil {
		t.Fatal(err)
	}
}

// applyOn is an apply of in (old: its stored spec) as the core makes it
// with p: the claim, the record written when the apply stands (opErr
// nil), the claim's end.
func applyOn(t *testing.T, p *Part, rs recorder, in, old *model.Instance, opErr error) error {
	t.Helper()
	end, err := p.Claim(t.Context(), part.Apply, &part.Instance{Spec: in, Old: old})
	if err != nil {
		return err
	}
	if opErr == nil {
		putInstance(t, rs, in)
	}
	end(t.Context(), opErr)
	return nil
}

// boltStore is the real bolt store as the part uses it.
func boltStore(t *testing.T) testStore { return stores.Bolt(t) }

// testStore is a store the tests write instance records in.
type testStore interface {
	Store
	recorder
}

// racing holds every caller of Record until two are there or done is
// closed: two claims of one MAC then both read "no claim" before either
// writes.
type racing struct {
	Store
	mu      sync.Mutex
	waiting int
	both    chan struct{}
	done    chan struct{}
}

func (r *racing) Record(ctx context.Context, key string) (store.Record, error) {
	r.mu.Lock()
	r.waiting++
	if r.waiting == 2 {
		close(r.both)
	}
	r.mu.Unlock()
	select {
	case <-r.both:
	case <-r.done:
	}
	return r.Store.Record(ctx, key)
}

func claimPart(st Store) *Part {
	p := New(nil, "")
	p.UseStore(st, slog.New(slog.DiscardHandler))
	return p
}

func instance(name, uuid string, macs ...string) *model.Instance {
	in := &model.Instance{Name: name, UUID: uuid}
	for _, m := range macs {
		in.NICs = append(in.NICs, model.NIC{MAC: m})
	}
	return in
}

// claims lists the MAC claim records of st: "mac=holder".
func claims(t *testing.T, st Store) []string {
	t.Helper()
	var out []string
	for _, mac := range []string{"52:54:00:00:00:01", "52:54:00:00:00:02", "52:54:00:00:00:03"} {
		r, err := st.Record(t.Context(), macKey(mac))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		h, err := decodeHolder(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, mac+"="+h.Name)
	}
	sort.Strings(out)
	return out
}

func wantClaims(t *testing.T, st Store, want ...string) {
	t.Helper()
	if got := claims(t, st); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("claims %v, want %v", got, want)
	}
}

// TestMACClaimConcurrentOneWins: two instances claim one MAC at once,
// both reading "no claim" before either writes (on the in-memory store
// and the real bolt and redis ones): exactly one wins, the other is refused with a
// conflict naming the field, the MAC and the winner; only the winner's
// claim stays once both operations ended.
func TestMACClaimConcurrentOneWins(t *testing.T) {
	for name, open := range map[string]func(*testing.T) testStore{
		"memory": func(*testing.T) testStore { return newMemStore() },
		"bolt":   boltStore,
		"redis":  func(t *testing.T) testStore { return stores.Redis(t) }, // many hosts' store
	} {
		t.Run(name, func(t *testing.T) {
			base := open(t)
			st := &racing{Store: base, both: make(chan struct{}), done: make(chan struct{})}
			p := claimPart(st)
			ins := []*model.Instance{
				instance("one", "00000000-0000-4000-8000-000000000001", "52:54:00:00:00:01"),
				instance("two", "00000000-0000-4000-8000-000000000002", "52:54:00:00:00:01"),
			}
			errs := make([]error, 2)
			var once sync.Once
			var wg sync.WaitGroup
			for i, in := range ins {
				wg.Go(func() {
					var end func(context.Context, error)
					end, errs[i] = p.Claim(t.Context(), part.Apply, &part.Instance{Spec: in})
					once.Do(func() { close(st.done) })
					if errs[i] == nil {
						putInstance(t, base, in)
						end(t.Context(), nil)
					}
				})
			}
			wg.Wait()
			if (errs[0] == nil) == (errs[1] == nil) {
				t.Fatalf("want exactly one claim to win: %v", errs)
			}
			won := 0
			if errs[0] != nil {
				won = 1
			}
			err := errs[1-won]
			if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), `nics[0].mac: "52:54:00:00:00:01"`) || !strings.Contains(err.Error(), "instance "+ins[won].Name) {
				t.Fatalf("the loser: %v; want a conflict on nics[0].mac naming %s", err, ins[won].Name)
			}
			wantClaims(t, base, "52:54:00:00:00:01="+ins[won].Name)
		})
	}
}

// TestMACClaimLifecycle: a claim is carried by the instance's re-apply,
// given back when the operation fails (only what it claimed), moved when
// a NIC's MAC changes or a NIC goes, released on delete.
func TestMACClaimLifecycle(t *testing.T) {
	ctx := t.Context()
	st := newMemStore()
	p := claimPart(st)
	const ua, ub = "00000000-0000-4000-8000-00000000000a", "00000000-0000-4000-8000-00000000000b"
	apply := func(in, old *model.Instance, opErr error) error {
		t.Helper()
		return applyOn(t, p, st, in, old, opErr)
	}
	a1 := instance("a", ua, "52:54:00:00:00:01")
	if err := apply(a1, nil, nil); err != nil {
		t.Fatal(err)
	}
	v1, _ := st.Record(ctx, macKey("52:54:00:00:00:01"))
	if err := apply(instance("a", ua, "52:54:00:00:00:01"), a1, nil); err != nil {
		t.Fatalf("re-apply: %v", err)
	}
	if v, _ := st.Record(ctx, macKey("52:54:00:00:00:01")); v.Version != v1.Version {
		t.Fatalf("a re-apply rewrote the claim: version %d, was %d", v.Version, v1.Version)
	}
	// A re-apply adding a NIC that fails: the new claim goes, the old stays.
	if err := apply(instance("a", ua, "52:54:00:00:00:01", "52:54:00:00:00:02"), a1, errors.New("define failed")); err != nil {
		t.Fatal(err)
	}
	wantClaims(t, st, "52:54:00:00:00:01=a")
	// The MAC changes: the old one is released once the apply stands.
	a2 := instance("a", ua, "52:54:00:00:00:02")
	if err := apply(a2, a1, nil); err != nil {
		t.Fatal(err)
	}
	wantClaims(t, st, "52:54:00:00:00:02=a")
	// Another instance takes the freed MAC; the held one is refused.
	if err := apply(instance("b", ub, "52:54:00:00:00:02"), nil, nil); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "instance a") {
		t.Fatalf("b with a's MAC: %v", err)
	}
	b := instance("b", ub, "52:54:00:00:00:01")
	if err := apply(b, nil, nil); err != nil {
		t.Fatalf("b with the freed MAC: %v", err)
	}
	wantClaims(t, st, "52:54:00:00:00:01=b", "52:54:00:00:00:02=a")
	// A detached NIC (ClaimMACs with the spec after): released.
	end, err := p.ClaimMACs(ctx, "detach NIC from", instance("b", ub), b)
	if err != nil {
		t.Fatal(err)
	}
	putInstance(t, st, instance("b", ub))
	end(ctx, nil)
	wantClaims(t, st, "52:54:00:00:00:02=a")
	// Delete (and force-delete: the record is gone) releases the rest.
	if err := st.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := p.AfterDelete(ctx, &part.Instance{Spec: a2}); err != nil {
		t.Fatal(err)
	}
	wantClaims(t, st)
}

// TestMACClaimsSurviveRestartAndAdopt: the claims are the store's: a
// restarted hostctl (the bolt file opened again, a new part) still
// refuses the MAC to another instance, another host adopting the
// instance carries them (same UUID: nothing rewritten), and the
// force-delete from the store releases them.
func TestMACClaimsSurviveRestartAndAdopt(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "vmeta.db")
	func() {
		st := stores.BoltAt(t, path)
		if err := applyOn(t, claimPart(st), st, instance("a", "00000000-0000-4000-8000-00000000000a", "52:54:00:00:00:01"), nil, nil); err != nil {
			t.Fatal(err)
		}
		st.Close()
	}()
	st := stores.BoltAt(t, path)
	_, err := claimPart(st).Claim(ctx, part.Apply, &part.Instance{Spec: instance("b", "00000000-0000-4000-8000-00000000000b", "52:54:00:00:00:01")})
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "instance a") || strings.Contains(err.Error(), "no record") {
		t.Fatalf("after a restart, b with a's MAC: %v", err)
	}
	before, _ := st.Record(ctx, macKey("52:54:00:00:00:01"))
	other := claimPart(st) // another host's hostctl on the same store
	a := instance("a", "00000000-0000-4000-8000-00000000000a", "52:54:00:00:00:01")
	end, err := other.Claim(ctx, part.Apply, &part.Instance{Spec: a, Old: a})
	if err != nil {
		t.Fatalf("the adopting host's apply: %v", err)
	}
	end(ctx, nil)
	if after, _ := st.Record(ctx, macKey("52:54:00:00:00:01")); after.Version != before.Version {
		t.Fatalf("the adopting apply rewrote the claim (version %d, was %d)", after.Version, before.Version)
	}
	if a := other.Answers()[part.ForceDelete]; a.Do != part.Act {
		t.Fatalf("force-delete answer %v: the core would not tell the part", a)
	}
	if err := st.Delete(ctx, "a"); err != nil { // the force-delete from the store
		t.Fatal(err)
	}
	if err := other.AfterDelete(ctx, &part.Instance{Spec: a, Host: "dead-host"}); err != nil {
		t.Fatal(err)
	}
	wantClaims(t, st)
}

// TestMACClaimSeesUnclaimedInstances: an instance stored before the
// claims existed holds no claim record; its MACs are still refused to
// another instance (its stored spec is read), and nothing stays claimed.
func TestMACClaimSeesUnclaimedInstances(t *testing.T) {
	st := newMemStore()
	st.insts = []store.Instance{{Name: "old", UUID: "00000000-0000-4000-8000-0000000000aa", Spec: []byte(`{"name":"old","nics":[{"mac":"52:54:00:00:00:02"}]}`)}}
	in := instance("new", "00000000-0000-4000-8000-0000000000bb", "52:54:00:00:00:01", "52:54:00:00:00:02")
	_, err := claimPart(st).Claim(t.Context(), part.Apply, &part.Instance{Spec: in})
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), `nics[1].mac: "52:54:00:00:00:02"`) || !strings.Contains(err.Error(), "instance old") {
		t.Fatalf("a MAC of an unclaimed instance: %v", err)
	}
	wantClaims(t, st)
}

// TestCheckAddresses: an apply is refused an address another instance
// has (409 naming the field, the address and the owner); its own
// addresses and the other operations pass.
func TestCheckAddresses(t *testing.T) {
	st := newMemStore()
	st.insts = []store.Instance{{Name: "owner", UUID: "00000000-0000-4000-8000-0000000000aa"}}
	st.addrs["10.1.0.7"] = "00000000-0000-4000-8000-0000000000aa"
	p := claimPart(st)
	in := &model.Instance{Name: "b", UUID: "00000000-0000-4000-8000-0000000000bb", Addresses: []string{"10.1.0.8", "10.1.0.7"}}
	err := p.Check(t.Context(), part.Apply, &part.Instance{Spec: in})
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), `addresses[1]: "10.1.0.7" is already the address of instance owner`) {
		t.Fatalf("apply at owner's address: %v", err)
	}
	if err := p.Check(t.Context(), part.Start, &part.Instance{Spec: in}); err != nil {
		t.Fatalf("start: %v", err)
	}
	in.UUID = "00000000-0000-4000-8000-0000000000aa"
	if err := p.Check(t.Context(), part.Apply, &part.Instance{Spec: in}); err != nil {
		t.Fatalf("the owner's re-apply: %v", err)
	}
}

var goldenHolder = Holder{UUID: "00000000-0000-4000-8000-00000000000a", Name: "web-1"}

func holderFormat() testenv.Stored[Holder] {
	return testenv.Stored[Holder]{Golden: filepath.Join("testdata", "mac-claim.v1.json"), Encode: encodeHolder, Decode: decodeHolder}
}

// TestStoredMACClaim: the stored format of a MAC claim record is its own
// (golden file), reads back whole, and keeps every field.
func TestStoredMACClaim(t *testing.T) {
	holderFormat().CheckGolden(t, goldenHolder, *update)
	holderFormat().CheckReads(t, goldenHolder)
	holderFormat().CheckRoundTrip(t, testenv.Filled[Holder](t))
	if _, err := decodeHolder([]byte(`{"name":"x"}`)); err == nil {
		t.Error("a claim without a uuid decoded")
	}
}

// TestMACClaimDomainChangedOutside: a NIC the domain got outside hostctl
// (the reconciler's republish: the part's Defined phase with the stored
// spec as Old) has its MAC claimed, given back when the republish fails;
// one another instance holds is left to it (logged: the domain has the
// NIC already). A claim whose NIC the domain lost outside hostctl goes
// when the instance is deleted.
func TestMACClaimDomainChangedOutside(t *testing.T) {
	ctx := t.Context()
	st := newMemStore()
	p := claimPart(st)
	const ua, ub = "00000000-0000-4000-8000-00000000000a", "00000000-0000-4000-8000-00000000000b"
	a := instance("a", ua, "52:54:00:00:00:01")
	if err := applyOn(t, p, st, a, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := applyOn(t, p, st, instance("b", ub, "52:54:00:00:00:03"), nil, nil); err != nil {
		t.Fatal(err)
	}
	grown := instance("a", ua, "52:54:00:00:00:01", "52:54:00:00:00:02", "52:54:00:00:00:03")
	republish := func(fail bool) {
		t.Helper()
		r := revert.New(slog.New(slog.DiscardHandler), "republish")
		if err := p.Defined(ctx, part.Apply, &part.Instance{Spec: grown, Old: a}, r); err != nil {
			t.Fatal(err)
		}
		if !fail {
			r.Success()
		}
		failed := errors.New("publish failed")
		r.Fail(&failed)
	}
	republish(true)
	wantClaims(t, st, "52:54:00:00:00:01=a", "52:54:00:00:00:03=b")
	republish(false)
	wantClaims(t, st, "52:54:00:00:00:01=a", "52:54:00:00:00:02=a", "52:54:00:00:00:03=b")
	// The domain loses the NIC outside hostctl: the stored spec no longer
	// has it, the claim stays with a until a is deleted.
	if err := st.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := p.AfterDelete(ctx, &part.Instance{Spec: a}); err != nil {
		t.Fatal(err)
	}
	wantClaims(t, st, "52:54:00:00:00:03=b")
}

// TestMACClaimOutlived: a claim whose holder has no record is an apply
// under way while pending (refused, saying so), unless the holder has
// the name applied now (an earlier attempt of it that died: taken over);
// a committed one outlived its instance (the release after its delete
// failed): taken over. A pending claim that went before its apply
// stood is written again by the commit.
func TestMACClaimOutlived(t *testing.T) {
	ctx := t.Context()
	st := newMemStore()
	p := claimPart(st)
	// a's first apply is under way: its claim is pending, no record.
	endA, err := p.Claim(ctx, part.Apply, &part.Instance{Spec: instance("a", "00000000-0000-4000-8000-00000000000a", "52:54:00:00:00:01")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Claim(ctx, part.Apply, &part.Instance{Spec: instance("b", "00000000-0000-4000-8000-00000000000b", "52:54:00:00:00:01")})
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "instance a has no record: its first apply is under way") {
		t.Fatalf("b with the MAC of a's apply under way: %v", err)
	}
	// a's hostctl died there; a is applied again (a new UUID).
	_ = endA
	a := instance("a", "00000000-0000-4000-8000-0000000000a2", "52:54:00:00:00:01")
	if err := applyOn(t, p, st, a, nil, nil); err != nil {
		t.Fatalf("a again after its first apply died: %v", err)
	}
	r, _ := st.Record(ctx, macKey("52:54:00:00:00:01"))
	if h, _ := decodeHolder(r.Value); h.UUID != a.UUID || h.Pending {
		t.Fatalf("claim after a's apply: %+v, want a's (%s), committed", h, a.UUID)
	}
	// a is deleted, and the release fails: its claim outlives it.
	if err := st.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := applyOn(t, p, st, instance("c", "00000000-0000-4000-8000-00000000000c", "52:54:00:00:00:01"), nil, nil); err != nil {
		t.Fatalf("c with the MAC of a claim that outlived a: %v", err)
	}
	wantClaims(t, st, "52:54:00:00:00:01=c")
	// A pending claim gone before the commit is written again.
	d := instance("d", "00000000-0000-4000-8000-00000000000d", "52:54:00:00:00:02")
	end, err := p.Claim(ctx, part.Apply, &part.Instance{Spec: d})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteRecord(ctx, macKey("52:54:00:00:00:02"), -1); err != nil {
		t.Fatal(err)
	}
	putInstance(t, st, d)
	end(ctx, nil)
	wantClaims(t, st, "52:54:00:00:00:01=c", "52:54:00:00:00:02=d")
}
