package redis

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
)

// shortLease makes a crashed writer's lock expire quickly.
var shortLease = WithLockLease(time.Second)

// setHook sets one of the Put test hooks (of a store opened withHooks) for
// the rest of the test.
func setHook(t *testing.T, hook *func() error, fn func() error) {
	t.Helper()
	*hook = fn
	t.Cleanup(func() { *hook = nil })
}

var errBoom = errors.New("boom")

// wantConsistent checks what a reader may rely on, at a moment when a
// writer has stopped between steps: every address lookup that finds an
// instance finds one whose record (and published document) lists the
// address, and every name lookup finds the record of that name.
func wantConsistent(t *testing.T, s *Store, addrs []string, names []string) {
	t.Helper()
	ctx := t.Context()
	for _, a := range addrs {
		uuid, err := s.LookupAddress(ctx, a)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("LookupAddress(%s): %v", a, err)
		}
		field, err := s.rdb.HGet(ctx, instKey(uuid), "addrs").Result()
		if err != nil {
			t.Fatalf("record of %s: %v", uuid, err)
		}
		listed, _ := decodeAddrs(field)
		doc, err := s.Document(ctx, uuid)
		if err != nil {
			t.Fatalf("Document(%s): %v", uuid, err)
		}
		if !slices.Contains(listed, a) || !slices.Contains(doc.Addresses, a) {
			t.Fatalf("LookupAddress(%s) = %s, whose record lists %v and document %v", a, uuid, listed, doc.Addresses)
		}
	}
	for _, n := range names {
		inst, err := s.Instance(ctx, n)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil || inst.Name != n {
			t.Fatalf("Instance(%s) = %+v, %v", n, inst, err)
		}
	}
}

// eventually retries put until it succeeds, as a caller would after a
// conflict with a claim that has not expired yet.
func eventually(t *testing.T, what string, put func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := put()
		if err == nil {
			return
		}
		if !errors.Is(err, store.ErrConflict) || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A Put that dies between its steps never makes a lookup return the wrong
// instance; its lock expires, a retry completes, and other instances can
// take over what it left claimed.
func TestCrashBetweenSteps(t *testing.T) {
	for _, tc := range []struct{ name, url string }{
		{"single", testenv.StartRedis(t)},
		{"cluster", testenv.ClusterURL(testenv.StartRedisCluster(t))},
	} {
		t.Run(tc.name, func(t *testing.T) { testCrashBetweenSteps(t, tc.url) })
	}
}

func testCrashBetweenSteps(t *testing.T, url string) {
	var h hooks
	s := openFlushed(t, url, shortLease, withHooks(&h))
	defer s.Close()
	ctx := t.Context()
	addrs := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"}
	names := []string{"vm-a", "vm-b", "vm-c"}
	inst := func(name, uuid string, addrs ...string) store.Instance {
		return store.Instance{Name: name, UUID: uuid, Addresses: addrs, Spec: []byte(`{}`)}
	}
	put := func(in store.Instance, expect int64) error {
		_, _, err := s.Put(ctx, in, store.Document{Addresses: in.Addresses, Tree: []byte(in.Name)}, expect)
		return err
	}
	owner := func(a, want string) {
		t.Helper()
		got, err := s.LookupAddress(ctx, a)
		if want == "" {
			if !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("LookupAddress(%s) = %q, %v; want not found", a, got, err)
			}
			return
		}
		if err != nil || got != want {
			t.Fatalf("LookupAddress(%s) = %q, %v; want %s", a, got, err, want)
		}
	}

	a := inst("vm-a", "u-a", "10.0.0.1", "10.0.0.2")
	if err := put(a, 0); err != nil {
		t.Fatalf("Put: %v", err)
	}

	// 1. Dies after claiming 10.0.0.3, before writing the record.
	moved := inst("vm-a", "u-a", "10.0.0.2", "10.0.0.3")
	setHook(t, &h.afterClaim, func() error {
		wantConsistent(t, s, addrs, names)
		return errBoom
	})
	if err := put(moved, 1); !errors.Is(err, errCrash) {
		t.Fatalf("Put stopped after claims: %v", err)
	}
	h.afterClaim = nil
	wantConsistent(t, s, addrs, names)
	owner("10.0.0.1", "u-a")
	owner("10.0.0.2", "u-a")
	owner("10.0.0.3", "") // claimed, not in the record
	if got, err := s.Instance(ctx, "vm-a"); err != nil || got.Revision != 1 || !slices.Equal(got.Addresses, a.Addresses) {
		t.Fatalf("Instance after a crashed update = %+v, %v; want revision 1 unchanged", got, err)
	}
	// While the dead writer's lock lasts, its claim is in use.
	b := inst("vm-b", "u-b", "10.0.0.3")
	if err := put(b, 0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Put of another instance claiming the half-claimed address: %v, want conflict", err)
	}
	// A retry of the Put waits the lock out and completes.
	if err := put(moved, 1); err != nil {
		t.Fatalf("retry of the crashed Put: %v", err)
	}
	owner("10.0.0.1", "")
	owner("10.0.0.2", "u-a")
	owner("10.0.0.3", "u-a")
	wantConsistent(t, s, addrs, names)

	// 2. Dies after writing the record, before releasing 10.0.0.2 and
	// 10.0.0.3 (and the lock).
	again := inst("vm-a", "u-a", "10.0.0.4")
	setHook(t, &h.afterWrite, func() error {
		wantConsistent(t, s, addrs, names)
		return errBoom
	})
	if err := put(again, 2); !errors.Is(err, errCrash) {
		t.Fatalf("Put stopped after the write: %v", err)
	}
	h.afterWrite = nil
	wantConsistent(t, s, addrs, names)
	owner("10.0.0.2", "") // still claimed, no longer in the record
	owner("10.0.0.3", "")
	owner("10.0.0.4", "u-a")
	if v, err := s.DocumentVersion(ctx, "u-a"); err != nil || v != 3 {
		t.Fatalf("DocumentVersion = %d, %v; want 3 (the write committed)", v, err)
	}
	// Another instance takes a left-over claim over once the lock is gone.
	b.Addresses = []string{"10.0.0.2"}
	eventually(t, "Put of vm-b taking over a left-over claim", func() error { return put(b, 0) })
	owner("10.0.0.2", "u-b")
	wantConsistent(t, s, addrs, names)
	// The dead writer's instance is writable again; its other left-over
	// claim goes when a write of it no longer wants it... or another
	// instance takes it.
	if err := put(inst("vm-a", "u-a", "10.0.0.4", "10.0.0.3"), 3); err != nil {
		t.Fatalf("Put after the crash: %v", err)
	}
	owner("10.0.0.3", "u-a")

	// 3. A create that dies after its claims: the name and address are
	// not visible, and another UUID gets them once the lock expires.
	c := inst("vm-c", "u-c1", "10.0.0.5")
	setHook(t, &h.afterClaim, func() error { return errBoom })
	if err := put(c, 0); !errors.Is(err, errCrash) {
		t.Fatalf("create stopped after claims: %v", err)
	}
	h.afterClaim = nil
	if _, err := s.Instance(ctx, "vm-c"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Instance of a crashed create: %v, want not found", err)
	}
	if _, err := s.Document(ctx, "u-c1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Document of a crashed create: %v, want not found", err)
	}
	list, err := s.Instances(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("Instances = %+v, %v; want vm-a and vm-b only", list, err)
	}
	owner("10.0.0.5", "")
	if err := s.Delete(ctx, "vm-c"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Delete of a crashed create: %v, want not found", err)
	}
	other := inst("vm-c", "u-c2", "10.0.0.5")
	eventually(t, "create of vm-c under another UUID", func() error { return put(other, 0) })
	owner("10.0.0.5", "u-c2")
	if got, err := s.Instance(ctx, "vm-c"); err != nil || got.UUID != "u-c2" {
		t.Fatalf("Instance(vm-c) = %+v, %v", got, err)
	}
	wantConsistent(t, s, addrs, names)

	// Delete cleans up after all that: nothing of vm-a is left but what a
	// crash made unreachable.
	for _, n := range []string{"vm-a", "vm-b", "vm-c"} {
		if err := s.Delete(ctx, n); err != nil {
			t.Fatalf("Delete(%s): %v", n, err)
		}
	}
	for _, a := range addrs {
		owner(a, "")
	}
}

// A refused Put gives back exactly what it claimed: the claims of the
// instance keep the token of its record, so nothing is left over.
func TestRefusedPutLeavesNoClaims(t *testing.T) {
	s := openFlushed(t, testenv.StartRedis(t))
	defer s.Close()
	ctx := t.Context()
	a := store.Instance{Name: "vm-a", UUID: "u-a", Addresses: []string{"10.0.0.1"}, Spec: []byte(`{}`)}
	b := store.Instance{Name: "vm-b", UUID: "u-b", Addresses: []string{"10.0.0.2"}, Spec: []byte(`{}`)}
	for _, in := range []store.Instance{a, b} {
		if _, _, err := s.Put(ctx, in, store.Document{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := s.scan(ctx, "*")
	values := map[string]string{}
	for _, k := range before {
		values[k], _ = s.rdb.Get(ctx, k).Result()
	}
	// vm-b re-claims its own address and a free one, then hits vm-a's.
	b.Addresses = []string{"10.0.0.2", "10.0.0.3", "10.0.0.1"}
	if _, _, err := s.Put(ctx, b, store.Document{}, 1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Put: %v, want conflict", err)
	}
	after, _ := s.scan(ctx, "*")
	if !slices.Equal(before, after) {
		t.Fatalf("keys before %v, after %v", before, after)
	}
	for _, k := range after {
		if v, _ := s.rdb.Get(ctx, k).Result(); v != values[k] {
			t.Errorf("%s = %q after a refused Put, was %q", k, v, values[k])
		}
	}
	// A refused Put leaves the instance unlocked.
	if n := s.rdb.Exists(ctx, lockKey("u-b")).Val(); n != 0 {
		t.Fatal("lock left after a refused Put")
	}
}
