package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/store"
)

// eventually polls cond until it holds; the timeout only bounds a broken
// test (nothing here asserts on how long things take).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// runServer starts s.Run until the test ends.
func runServer(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func hostname(s http.Handler, remote string) string {
	r := do(s, "GET", "/latest/meta-data/hostname", remote)
	if r.status != 200 {
		return fmt.Sprintf("status %d", r.status)
	}
	return r.body
}

// republish publishes the rich instance under another hostname (without
// telling the feed) and returns the change the feed would carry.
func republish(t *testing.T, docs *fakeDocs, host string) store.Change {
	t.Helper()
	in := richInstance(t)
	in.Hostname = host
	docs.publish(t, in)
	return store.Change{UUID: in.UUID, Version: docs.version(in.UUID), Addresses: in.Addresses}
}

func TestWatchInvalidates(t *testing.T) {
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	docs.publish(t, otherInstance(t))
	o := testOptions(at("2026-01-01"))
	o.SweepInterval = -1 // only the feed
	s := New(docs, o)
	runServer(t, s)
	eventually(t, "subscription", func() bool { return docs.subscribers() == 1 })

	if h := hostname(s, richAddr); h != "web-1.novalocal" {
		t.Fatalf("before: %q", h)
	}
	hostname(s, otherAddr)
	ch := republish(t, docs, "web-2")
	if h := hostname(s, richAddr); h != "web-1.novalocal" {
		t.Fatalf("cached view changed without a message: %q", h)
	}
	docs.send(ch)
	eventually(t, "the change to be served", func() bool { return hostname(s, richAddr) == "web-2.novalocal" })
	// Every address of the instance follows.
	if h := hostname(s, "[::1]:1"); h != "web-2.novalocal" {
		t.Errorf("other address: %q", h)
	}

	// A message about a version the cache already has changes nothing.
	fetches := docs.fetches.Load()
	docs.send(store.Change{UUID: richUUID, Version: ch.Version})
	docs.send(store.Change{UUID: richUUID, Version: ch.Version - 1})
	docs.send(store.Change{UUID: otherUUID, Version: docs.version(otherUUID)})
	// A message for an unknown instance, to know the others were handled.
	docs.send(store.Change{UUID: "unknown", Version: 1})
	eventually(t, "messages handled", func() bool { return docs.pending() == 0 })
	// The unknown instance's publish has the warmer read it (warm.go):
	// the one fetch the messages make.
	eventually(t, "the warmer's read", func() bool { return docs.fetches.Load() == fetches+1 })
	hostname(s, richAddr)
	hostname(s, otherAddr)
	if got := docs.fetches.Load(); got != fetches+1 {
		t.Errorf("%d fetches after messages about current versions and one unknown instance, want 1", got-fetches)
	}

	// Deletion (version 0).
	docs.mu.Lock()
	delete(docs.docs, otherUUID)
	delete(docs.addrs, "10.0.0.6")
	delete(docs.addrs, "fd00::6")
	docs.mu.Unlock()
	docs.send(store.Change{UUID: otherUUID, Version: 0, Addresses: []string{"10.0.0.6", "fd00::6"}})
	eventually(t, "deletion", func() bool { return do(s, "GET", "/latest/meta-data/hostname", otherAddr).status == 404 })
}

// TestWatchAddressMoved: an address that moves from one instance to
// another is served for the new owner after the changes.
func TestWatchAddressMoved(t *testing.T) {
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	docs.publish(t, otherInstance(t))
	s := New(docs, testOptions(at("2026-01-01")))
	if h := hostname(s, "127.0.0.1:1"); h != "web-1.novalocal" {
		t.Fatal(h)
	}
	// web-1 gives 127.0.0.1 up, db-1 takes it: two publishes, but only
	// db-1's message arrives (the other was lost).
	a := richInstance(t)
	a.Addresses = []string{"10.0.0.5", "::1"}
	docs.publish(t, a)
	b := otherInstance(t)
	b.Addresses = append(b.Addresses, "127.0.0.1")
	docs.publish(t, b)
	s.applyChange(t.Context(), store.Change{UUID: otherUUID, Version: docs.version(otherUUID), Addresses: []string{"10.0.0.6", "fd00::6", "127.0.0.1"}})
	if h := hostname(s, "127.0.0.1:1"); h != "db-1.novalocal" {
		t.Errorf("moved address: %q, want db-1.novalocal", h)
	}
}

// TestResync: a Resync message makes the cache compare every version.
func TestResync(t *testing.T) {
	s, docs, _ := setup(t, "2026-01-01")
	hostname(s, richAddr)
	republish(t, docs, "web-2")
	versions := docs.versions.Load()
	s.applyChange(t.Context(), store.Change{Resync: true})
	if docs.versions.Load() == versions {
		t.Error("Resync did not check versions")
	}
	if h := hostname(s, richAddr); h != "web-2.novalocal" {
		t.Errorf("after Resync: %q", h)
	}
}

// TestConvergenceSweep: a replica that missed a message (the store's
// version moved, the feed said nothing) converges at the next sweep.
func TestConvergenceSweep(t *testing.T) {
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	o := testOptions(at("2026-01-01"))
	o.SweepInterval = 5 * time.Millisecond
	s := New(docs, o)
	runServer(t, s)
	hostname(s, richAddr)
	republish(t, docs, "web-2") // no message
	eventually(t, "the sweep to converge", func() bool { return hostname(s, richAddr) == "web-2.novalocal" })

	// A sweep that finds nothing changed drops nothing.
	fetches := docs.fetches.Load()
	s.sweep(t.Context())
	hostname(s, richAddr)
	if docs.fetches.Load() != fetches {
		t.Error("an unchanged view was dropped by the sweep")
	}
	// An instance deleted behind our back is dropped too.
	docs.mu.Lock()
	delete(docs.docs, richUUID)
	clear(docs.addrs)
	docs.mu.Unlock()
	s.sweep(t.Context())
	if r := get(s, "/latest/meta-data/hostname"); r.status != 404 {
		t.Errorf("deleted instance after a sweep: %d", r.status)
	}
}

// TestLosslessFeedNoPeriodicSweep: following a feed that loses nothing
// unsaid, the periodic tick checks the store but reads no versions; a
// Resync and a new subscription still sweep.
func TestLosslessFeedNoPeriodicSweep(t *testing.T) {
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	o := testOptions(at("2026-01-01"))
	o.SweepInterval = time.Millisecond
	s := New(losslessDocs{docs}, o)
	runServer(t, s)
	eventually(t, "subscription", func() bool { return docs.subscribers() == 1 })
	hostname(s, richAddr)
	versions, pings := docs.versions.Load(), docs.pings.Load()
	eventually(t, "three ticks", func() bool { return docs.pings.Load() >= pings+3 })
	if n := docs.versions.Load(); n != versions {
		t.Errorf("the periodic tick read %d versions; want none (the feed loses nothing unsaid)", n-versions)
	}
	republish(t, docs, "web-2") // no message: only a Resync or a new subscription finds it
	docs.send(store.Change{Resync: true})
	eventually(t, "the Resync's sweep", func() bool { return hostname(s, richAddr) == "web-2.novalocal" })
	republish(t, docs, "web-3")
	docs.dropFeed()
	eventually(t, "the new subscription's sweep", func() bool { return hostname(s, richAddr) == "web-3.novalocal" })
}

// TestFeedDropped: when the subscription breaks, Run subscribes again and
// sweeps, so a change made while it was down is served.
func TestFeedDropped(t *testing.T) {
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	o := testOptions(at("2026-01-01"))
	o.SweepInterval = -1 // the re-subscription alone must converge
	s := New(docs, o)
	runServer(t, s)
	eventually(t, "subscription", func() bool { return docs.subscribers() == 1 })
	hostname(s, richAddr)
	docs.dropFeed()
	republish(t, docs, "web-2") // the message is lost with the feed
	eventually(t, "re-subscription", func() bool { return docs.watches.Load() >= 2 && docs.subscribers() == 1 })
	eventually(t, "convergence", func() bool { return hostname(s, richAddr) == "web-2.novalocal" })
}

// TestWatchRetry: a feed that cannot be had at start (store down) is
// subscribed to once the store is back.
func TestWatchRetry(t *testing.T) {
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	docs.setDown(errors.New("connection refused"))
	o := testOptions(at("2026-01-01"))
	o.SweepInterval = -1
	s := New(docs, o)
	runServer(t, s)
	eventually(t, "a failed attempt", func() bool { return docs.watches.Load() >= 1 })
	docs.setDown(nil)
	eventually(t, "subscription", func() bool { return docs.subscribers() == 1 })
}

func TestStoreOutage(t *testing.T) {
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	docs.publish(t, otherInstance(t))
	s := New(docs, testOptions(at("2026-01-01")))
	ops := s.MetricsHandler()

	if h := hostname(s, richAddr); h != "web-1.novalocal" {
		t.Fatal(h)
	}
	health := func(h http.Handler) (int, map[string]string) {
		r := do(h, "GET", "/healthz", "192.0.2.1:1")
		var m map[string]string
		if err := json.Unmarshal([]byte(r.body), &m); err != nil {
			t.Fatalf("healthz body %q: %v", r.body, err)
		}
		if mediaType(r.ctype) != appJSON {
			t.Errorf("healthz Content-Type %q", r.ctype)
		}
		return r.status, m
	}
	if code, m := health(ops); code != 200 || m["status"] != "ok" {
		t.Errorf("healthz before the outage: %d %v", code, m)
	}

	docs.setDown(errors.New("dial tcp 10.9.9.9:6379: connection refused"))
	// Cached: served (stale but correct for that instance).
	for _, p := range []string{"/latest/meta-data/hostname", "/openstack/latest/meta_data.json", "/openstack", "/latest/meta-data/"} {
		if r := get(s, p); r.status != 200 {
			t.Errorf("cached %s during the outage: %d", p, r.status)
		}
	}
	// Not cached: 503 with a short body.
	r := do(s, "GET", "/latest/meta-data/hostname", otherAddr)
	if r.status != 503 || len(r.body) > 100 || strings.Contains(r.body, "10.9.9.9") {
		t.Errorf("miss during the outage: %d %q", r.status, r.body)
	}
	// A sweep during the outage drops nothing.
	s.sweep(t.Context())
	if h := hostname(s, richAddr); h != "web-1.novalocal" {
		t.Errorf("after a sweep during the outage: %q", h)
	}
	// Health: degraded, with the store error, for the operator only; a
	// guest's /healthz is an unknown path like any other.
	if code, m := health(ops); code != 503 || m["status"] != "degraded" || !strings.HasPrefix(m["store"], "unreachable: ") || !strings.Contains(m["store"], "connection refused") {
		t.Errorf("operator healthz during the outage: %d %v", code, m)
	}
	guestHealthHidden(t, s)
	if !strings.Contains(scrape(t, s), "vmeta_metadata_store_up 0") {
		t.Error("store_up is not 0 during the outage")
	}

	// A change made during the outage is served once the store is back
	// (here by the sweep after re-subscription, as Run does).
	republish(t, docs, "web-2")
	docs.setDown(nil)
	s.sweep(t.Context())
	if h := hostname(s, richAddr); h != "web-2.novalocal" {
		t.Errorf("after the outage: %q", h)
	}
	if h := hostname(s, otherAddr); h != "db-1.novalocal" {
		t.Errorf("miss after the outage: %q", h)
	}
	if code, m := health(ops); code != 200 || m["status"] != "ok" {
		t.Errorf("healthz after the outage: %d %v", code, m)
	}
	guestHealthHidden(t, s)
}

// guestHealthHidden checks that the guest listener answers /healthz
// exactly as an unknown path (the same status and body as
// /no-such-path from the same caller), from a known guest and from
// unknown addresses: no health document, nothing about the store beyond
// what any request tells.
func guestHealthHidden(t *testing.T, s *Server) {
	t.Helper()
	for _, remote := range []string{richAddr, "203.0.113.9:1"} {
		want := do(s, "GET", "/no-such-path", remote)
		for _, p := range []string{"/healthz", "/healthz/", "/latest/../healthz"} {
			r := do(s, "GET", p, remote)
			if r.status != want.status || r.body != want.body || strings.Contains(r.body, "degraded") || strings.Contains(r.body, `"status"`) {
				t.Errorf("guest GET %s from %s: %d %q, want an unknown path's answer %d %q", p, remote, r.status, r.body, want.status, want.body)
			}
		}
	}
	if r := do(s, "GET", "/healthz", richAddr); r.status != http.StatusNotFound {
		t.Errorf("guest GET /healthz from a known guest: %d %q, want 404", r.status, r.body)
	}
}

// TestHealthzPings: with no traffic, the operator's /healthz asks the
// store itself.
func TestHealthzPings(t *testing.T) {
	docs := newFakeDocs()
	s := New(docs, testOptions(at("2026-01-01")))
	docs.setDown(errors.New("no route to host"))
	ops := s.MetricsHandler()
	if r := do(ops, "GET", "/healthz", "192.0.2.1:1"); r.status != 503 || !strings.Contains(r.body, "no route to host") {
		t.Errorf("healthz with the store down and no traffic: %d %s", r.status, r.body)
	}
	if r := do(ops, "POST", "/healthz", "192.0.2.1:1"); r.status != 405 {
		t.Errorf("POST /healthz: %d", r.status)
	}
}

// TestMissesCoalesce: concurrent misses for one address (or one proxied
// instance id) read the store once.
func TestMissesCoalesce(t *testing.T) {
	for _, mode := range []string{"address", "proxy"} {
		t.Run(mode, func(t *testing.T) {
			s := proxySetup(t, nil)
			docs := s.docs.(*fakeDocs)
			entered, release := make(chan struct{}), make(chan struct{})
			docs.mu.Lock()
			docs.afterFetch = func() { close(entered); <-release }
			docs.mu.Unlock()
			remote, h := richAddr, http.Header(nil)
			if mode == "proxy" {
				remote, h = proxyPeer, proxyHdr(richUUID, "demo", sig(testProxySecret, richUUID))
			}
			const n = 20
			var wg sync.WaitGroup
			results := make(chan response, n)
			for range n {
				wg.Go(func() { results <- req(s, "GET", "/latest/meta-data/hostname", remote, h, "") })
			}
			<-entered
			// Let the others pile up on the fill.
			eventually(t, "waiters", func() bool {
				s.cache.mu.RLock()
				defer s.cache.mu.RUnlock()
				w := 0
				for _, f := range s.cache.uuidFills {
					w += f.waiters
				}
				for _, f := range s.cache.addrFills {
					w += f.waiters
				}
				return w == n-1
			})
			close(release)
			wg.Wait()
			close(results)
			for r := range results {
				if r.status != 200 || r.body != "web-1.novalocal" {
					t.Errorf("%d %q", r.status, r.body)
				}
			}
			if f := docs.fetches.Load(); f != 1 {
				t.Errorf("%d document fetches for %d concurrent misses, want 1", f, n)
			}
			if mode == "address" && docs.lookups.Load() != 1 {
				t.Errorf("%d address lookups, want 1", docs.lookups.Load())
			}
		})
	}
}

// TestNegativeNotCached: an unknown address is asked again next time, so
// an instance published after a 404 is served without any invalidation.
func TestNegativeNotCached(t *testing.T) {
	docs := newFakeDocs()
	s := New(docs, testOptions(at("2026-01-01")))
	if r := get(s, "/latest/meta-data/hostname"); r.status != 404 {
		t.Fatalf("before publish: %d", r.status)
	}
	docs.publish(t, richInstance(t))
	if h := hostname(s, richAddr); h != "web-1.novalocal" {
		t.Errorf("after publish: %q", h)
	}
}

// TestCachedInstancesGauge: the gauge follows fills and invalidations.
func TestCachedInstancesGauge(t *testing.T) {
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	docs.publish(t, otherInstance(t))
	s := New(docs, testOptions(at("2026-01-01")))
	hostname(s, richAddr)
	hostname(s, otherAddr)
	hostname(s, "[::1]:1")
	if !strings.Contains(scrape(t, s), "vmeta_metadata_cached_instances 2\n") {
		t.Errorf("gauge with two instances cached:\n%s", scrape(t, s))
	}
	s.Invalidate(otherUUID)
	if !strings.Contains(scrape(t, s), "vmeta_metadata_cached_instances 1\n") {
		t.Error("gauge after Invalidate")
	}
	s.cache.mu.RLock()
	naddrs := s.cache.addrs.len()
	s.cache.mu.RUnlock()
	if naddrs != 2 { // 10.0.0.5 and ::1 of web-1
		t.Errorf("%d cached addresses, want 2", naddrs)
	}
}

// TestAddrIndex: IPv4 addresses keyed by their bits and the others by
// themselves find what was set for them, and only that.
func TestAddrIndex(t *testing.T) {
	x := newAddrIndex()
	addrs := []string{"10.0.0.5", "10.0.0.6", "0.0.0.0", "255.255.255.255", "::1", "2001:db8::1", "::ffff:10.0.0.7", "::"}
	views := map[string]*view{}
	for _, a := range addrs {
		views[a] = &view{uuid: a}
		x.set(netip.MustParseAddr(a), views[a])
	}
	if x.len() != len(addrs) {
		t.Fatalf("len %d, want %d", x.len(), len(addrs))
	}
	for _, a := range addrs {
		if got := x.get(netip.MustParseAddr(a)); got != views[a] {
			t.Errorf("get(%s) = %v, want its view", a, got)
		}
	}
	// The IPv4-mapped form is another key (callers unmap first).
	if got := x.get(netip.MustParseAddr("::ffff:10.0.0.5")); got != nil {
		t.Errorf("get(::ffff:10.0.0.5) = %s, want nothing", got.uuid)
	}
	if got := x.get(netip.MustParseAddr("10.0.0.7")); got != nil {
		t.Errorf("get(10.0.0.7) = %s, want nothing", got.uuid)
	}
	for _, a := range addrs {
		x.del(netip.MustParseAddr(a))
		if got := x.get(netip.MustParseAddr(a)); got != nil {
			t.Errorf("get(%s) after del = %s", a, got.uuid)
		}
	}
	if x.len() != 0 {
		t.Errorf("len %d after deleting all", x.len())
	}
}
