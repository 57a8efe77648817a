package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/store"
)

// watchTimeout bounds the wait for one change; changes normally arrive in
// well under a millisecond, so this only decides how long a broken feed
// takes to fail.
const watchTimeout = 10 * time.Second

// Next returns the next document change from ch, skipping Resyncs (a
// Resync is always allowed: delivery is at most once) and key changes, failing the test when none
// comes within a generous timeout or ch is closed. Backend tests use it
// too.
func Next(t testing.TB, ch <-chan store.Change) store.Change {
	t.Helper()
	return NextFor(t, ch)
}

// NextFor is Next skipping changes of instances other than uuids (all
// when none are given). On a Redis Cluster a change published on one node
// reaches a subscriber on another a little later, so a watcher may still
// get changes committed just before it subscribed (an earlier subtest's,
// on a reused server): the watch tests use UUIDs of their own and skip the
// rest.
func NextFor(t testing.TB, ch <-chan store.Change, uuids ...string) store.Change {
	t.Helper()
	timer := time.NewTimer(watchTimeout)
	defer timer.Stop()
	for {
		select {
		case c, ok := <-ch:
			if !ok {
				t.Fatalf("watch channel closed while waiting for a change")
			}
			if c.Resync || c.Key != nil || len(uuids) > 0 && !slices.Contains(uuids, c.UUID) {
				continue
			}
			return c
		case <-timer.C:
			t.Fatalf("no change within %s", watchTimeout)
			return store.Change{}
		}
	}
}

// WaitResync reads ch until a Change with Resync set arrives, failing the
// test when none comes within a generous timeout or ch is closed. It
// returns the changes read before it.
func WaitResync(t testing.TB, ch <-chan store.Change) []store.Change {
	t.Helper()
	timer := time.NewTimer(watchTimeout)
	defer timer.Stop()
	var before []store.Change
	for {
		select {
		case c, ok := <-ch:
			if !ok {
				t.Fatalf("watch channel closed while waiting for a resync")
			}
			if c.Resync {
				if c.UUID != "" || c.Version != 0 || len(c.Addresses) != 0 {
					t.Fatalf("resync change carries data: %+v", c)
				}
				return before
			}
			before = append(before, c)
		case <-timer.C:
			t.Fatalf("no resync within %s (got %+v)", watchTimeout, before)
			return nil
		}
	}
}

// WantChange fails the test unless c is about uuid at version, with
// exactly the addresses addrs (in any order).
func WantChange(t testing.TB, c store.Change, uuid string, version int64, addrs ...string) {
	t.Helper()
	got := slices.Clone(c.Addresses)
	want := slices.Clone(addrs)
	slices.Sort(got)
	slices.Sort(want)
	if c.UUID != uuid || c.Version != version || !slices.Equal(got, want) || c.Resync {
		t.Fatalf("change = %+v, want uuid %s, version %d, addresses %v", c, uuid, version, want)
	}
}

// watchUUIDs counts the UUIDs newWatchUUID has handed out.
var watchUUIDs atomic.Int64

// newWatchUUID returns a UUID no other test uses (in this test binary), so
// that a watcher can tell its test's changes from late ones of earlier
// tests (see NextFor).
func newWatchUUID() string {
	return fmt.Sprintf("00000000-0000-4000-9000-%012d", watchUUIDs.Add(1))
}

func watch(t *testing.T, s store.Store) (<-chan store.Change, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := s.Watch(ctx)
	if err != nil {
		cancel()
		t.Fatalf("Watch: %v", err)
	}
	t.Cleanup(cancel)
	return ch, cancel
}

// testWatch: changes made through writer reach a watcher of s, in order,
// with the addresses before and after.
func testWatch(t *testing.T, s, writer store.Store) {
	ch, _ := watch(t, s)
	a := newInstance("vm-a", newWatchUUID(), "10.0.0.1", "2001:db8::1")
	b := newInstance("vm-b", newWatchUUID())
	next := func() store.Change { t.Helper(); return NextFor(t, ch, a.UUID, b.UUID) }
	put(t, writer, a, "a1", 0)
	WantChange(t, next(), a.UUID, 1, "10.0.0.1", "2001:db8::1")

	// A new address and a dropped one: the change names both sets.
	a.Addresses = []string{"10.0.0.1", "10.0.0.9"}
	put(t, writer, a, "a2", 1)
	WantChange(t, next(), a.UUID, 2, "10.0.0.1", "2001:db8::1", "10.0.0.9")

	put(t, writer, b, "b1", 0)
	WantChange(t, next(), b.UUID, 1)

	// A refused Put publishes nothing; the next change is the delete.
	c := newInstance("vm-c", newWatchUUID(), "10.0.0.9")
	if _, _, err := writer.Put(t.Context(), c, newDocument(c, "c"), -1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Put claiming a held address: %v, want conflict", err)
	}
	if err := writer.Delete(t.Context(), "vm-a"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	WantChange(t, next(), a.UUID, 0, "10.0.0.1", "10.0.0.9")

	// Secrets and passwords are not document changes.
	if err := writer.PutSecret(t.Context(), b.UUID, "s", store.WrappedSecret{KeyID: "k"}); err != nil {
		t.Fatalf("PutSecret: %v", err)
	}
	if err := writer.SetPassword(t.Context(), b.UUID, []byte("pw")); err != nil {
		t.Fatalf("SetPassword: %v", err)
	}
	put(t, writer, b, "b2", 1)
	WantChange(t, next(), b.UUID, 2)
}

// testWatchCancel: the channel is closed once the context is done, and a
// store with no watchers left still works.
func testWatchCancel(t *testing.T, s store.Store) {
	ch, cancel := watch(t, s)
	in := newInstance("vm", newWatchUUID(), "10.0.0.1")
	put(t, s, in, "t", 0)
	WantChange(t, NextFor(t, ch, in.UUID), in.UUID, 1, "10.0.0.1")
	cancel()
	timer := time.NewTimer(watchTimeout)
	defer timer.Stop()
	for closed := false; !closed; {
		select {
		case _, ok := <-ch:
			closed = !ok
		case <-timer.C:
			t.Fatalf("watch channel still open %s after cancel", watchTimeout)
		}
	}
	put(t, s, in, "t2", 1)
	ch2, _ := watch(t, s)
	put(t, s, in, "t3", 2)
	c := NextFor(t, ch2, in.UUID)
	if c.Version == 2 {
		// Made before the watch; on a Redis Cluster it may still arrive.
		c = NextFor(t, ch2, in.UUID)
	}
	WantChange(t, c, in.UUID, 3, "10.0.0.1")
}

// testWatchConcurrent: several watchers (on both clients) each get every
// change, in order, while writers on both clients publish.
func testWatchConcurrent(t *testing.T, s, peer store.Store) {
	const watchers, instances, puts = 4, 3, 20
	chans := make([]<-chan store.Change, watchers)
	for i := range chans {
		w := s
		if i%2 == 1 {
			w = peer
		}
		chans[i], _ = watch(t, w)
	}
	var uuids []string
	for range instances {
		uuids = append(uuids, newWatchUUID())
	}
	var wg sync.WaitGroup
	errs := make(chan error, instances)
	for n := range instances {
		wg.Go(func() {
			w := s
			if n%2 == 1 {
				w = peer
			}
			in := newInstance(fmt.Sprintf("vm-%d", n), uuids[n], fmt.Sprintf("10.0.0.%d", n+1))
			for i := range puts {
				if _, _, err := w.Put(t.Context(), in, newDocument(in, fmt.Sprint(i)), int64(i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, ch := range chans {
		last := map[string]int64{}
		for range instances * puts {
			c := NextFor(t, ch, uuids...)
			if c.Version != last[c.UUID]+1 {
				t.Fatalf("watcher %d: instance %s went from version %d to %d", i, c.UUID, last[c.UUID], c.Version)
			}
			last[c.UUID] = c.Version
		}
		for n := range instances {
			if last[uuids[n]] != puts {
				t.Fatalf("watcher %d: instance %s ended at version %d, want %d", i, uuids[n], last[uuids[n]], puts)
			}
		}
	}
}

func testPassword(t *testing.T, s store.Store) {
	ctx := t.Context()
	in := newInstance("vm", uuidOf(1), "10.0.0.1")

	// No instance, no password.
	wantErrIs(t, "SetPassword of an unknown instance", s.SetPassword(ctx, in.UUID, []byte("x")), store.ErrNotFound)
	_, err := s.Password(ctx, in.UUID)
	wantErrIs(t, "Password of an unknown instance", err, store.ErrNotFound)

	put(t, s, in, "t", 0)
	_, err = s.Password(ctx, in.UUID)
	wantErrIs(t, "Password before one is set", err, store.ErrNotFound)

	// Bytes intact, beyond the HTTP limit of 1020 (not the store's to
	// enforce), every byte value included.
	pw := make([]byte, 4096)
	for i := range pw {
		pw[i] = byte(i * 7)
	}
	if err := s.SetPassword(ctx, in.UUID, pw); err != nil {
		t.Fatalf("SetPassword: %v", err)
	}
	wantPassword := func(what string, want []byte) {
		t.Helper()
		got, err := s.Password(ctx, in.UUID)
		if err != nil {
			t.Fatalf("Password %s: %v", what, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("Password %s: %d bytes, not the %d set", what, len(got), len(want))
		}
	}
	wantPassword("after SetPassword", pw)

	// Set once.
	err = s.SetPassword(ctx, in.UUID, []byte("second"))
	wantErrIs(t, "second SetPassword", err, store.ErrConflict)
	wantPassword("after a refused SetPassword", pw)

	// An update of the instance keeps it; another instance has none.
	put(t, s, in, "t2", 1)
	wantPassword("after an update", pw)
	other := newInstance("other", uuidOf(2))
	put(t, s, other, "o", 0)
	_, err = s.Password(ctx, other.UUID)
	wantErrIs(t, "Password of another instance", err, store.ErrNotFound)

	// Deleted with the instance; a new instance of the same UUID starts
	// without one.
	if err := s.Delete(ctx, "vm"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err = s.Password(ctx, in.UUID)
	wantErrIs(t, "Password after Delete", err, store.ErrNotFound)
	put(t, s, in, "t", 0)
	_, err = s.Password(ctx, in.UUID)
	wantErrIs(t, "Password of the re-created instance", err, store.ErrNotFound)
	short := []byte{0, '\n', 0xff}
	if err := s.SetPassword(ctx, in.UUID, short); err != nil {
		t.Fatalf("SetPassword after re-create: %v", err)
	}
	wantPassword("after re-create", short)
}

// testPasswordConcurrent: of many guests posting at once, exactly one
// password is stored.
func testPasswordConcurrent(t *testing.T, s store.Store) {
	const posters = 16
	in := newInstance("vm", uuidOf(1))
	put(t, s, in, "t", 0)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners [][]byte
		errs    = make(chan error, posters)
	)
	for i := range posters {
		wg.Go(func() {
			pw := []byte(fmt.Sprintf("password-%d", i))
			switch err := s.SetPassword(t.Context(), in.UUID, pw); {
			case err == nil:
				mu.Lock()
				winners = append(winners, pw)
				mu.Unlock()
			case !errors.Is(err, store.ErrConflict):
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(winners) != 1 {
		t.Fatalf("%d SetPassword calls succeeded, want 1", len(winners))
	}
	got, err := s.Password(t.Context(), in.UUID)
	if err != nil || !bytes.Equal(got, winners[0]) {
		t.Fatalf("Password = %q, %v; want the winner's %q", got, err, winners[0])
	}
}

func testPing(t *testing.T, s store.Store) {
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

// testWatchKeys: a key rotation announced through one client (NotifyKey)
// reaches a watcher of another as a Change with Key set and nothing else,
// among document changes; an empty class is refused.
func testWatchKeys(t *testing.T, s, writer store.Store) {
	kn, ok := writer.(store.KeyNotifier)
	if !ok {
		t.Fatalf("%T does not implement store.KeyNotifier", writer)
	}
	ch, _ := watch(t, s)
	a := newInstance("vm-k", newWatchUUID())
	put(t, writer, a, "a1", 0)
	class := fmt.Sprintf("test-key-%d", watchUUIDs.Add(1))
	for gen := int64(1); gen <= 2; gen++ {
		if err := kn.NotifyKey(t.Context(), store.KeyVersion{Class: class, Generation: gen}); err != nil {
			t.Fatalf("NotifyKey: %v", err)
		}
	}
	put(t, writer, a, "a2", 1)
	if err := kn.NotifyKey(t.Context(), store.KeyVersion{}); err == nil {
		t.Fatal("NotifyKey with an empty class: no error")
	}
	var got []string
	timer := time.NewTimer(watchTimeout)
	defer timer.Stop()
	for len(got) < 4 {
		select {
		case c, ok := <-ch:
			if !ok {
				t.Fatal("watch channel closed")
			}
			switch {
			case c.Resync:
			case c.Key != nil && c.Key.Class == class:
				if c.UUID != "" || c.Version != 0 || len(c.Addresses) != 0 {
					t.Fatalf("key change carries document data: %+v", c)
				}
				got = append(got, fmt.Sprintf("key %d", c.Key.Generation))
			case c.UUID == a.UUID:
				got = append(got, fmt.Sprintf("doc %d", c.Version))
			}
		case <-timer.C:
			t.Fatalf("changes within %s: %v, want 4", watchTimeout, got)
		}
	}
	// On a Redis Cluster messages published through different nodes may
	// arrive in any order: only the set is compared.
	want := []string{"doc 1", "doc 2", "key 1", "key 2"}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("changes %v, want %v", got, want)
	}
}
