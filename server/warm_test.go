package server

import (
	"context"
	"testing"

	"github.com/vmeta/vmeta/internal/store"
)

// listingDocs is the fake store listing its instances, as store.Store
// does (the warmer reads them when Run starts).
type listingDocs struct{ *fakeDocs }

func (l listingDocs) Instances(context.Context) ([]store.Instance, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []store.Instance
	for uuid, d := range l.docs {
		out = append(out, store.Instance{UUID: uuid, Addresses: d.Addresses})
	}
	return out, nil
}

// warmed reports whether the view of uuid is cached with the directories
// cloud-init reads built, and addr mapped to it.
func warmed(s *Server, uuid, addr string) bool {
	v := s.cache.byUUID(uuid)
	if v == nil {
		return false
	}
	for _, i := range warmVersions {
		if v.dirs[i].Load() == nil {
			return false
		}
	}
	return s.cache.byAddr(peerAddr(addr)) == v
}

// bootReads replays cloud-init's boot requests from addr and returns the
// store reads they made (address lookups, document fetches).
func bootReads(t *testing.T, s *Server, docs *fakeDocs, addr string) int64 {
	t.Helper()
	before := docs.lookups.Load() + docs.fetches.Load()
	for _, p := range bootPaths {
		if r := do(s, "GET", p, addr); r.status != 200 {
			t.Fatalf("%s: status %d", p, r.status)
		}
	}
	return docs.lookups.Load() + docs.fetches.Load() - before
}

// TestWarmOnStart (issue 23 item 3): Run reads the store's instances into
// the cache before their guests ask — a fresh process's first boot
// requests make no store read, as a warm one's.
func TestWarmOnStart(t *testing.T) {
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	docs.publish(t, otherInstance(t))
	o := testOptions(at("2026-01-01"))
	o.SweepInterval = -1
	s := New(listingDocs{docs}, o)
	runServer(t, s)
	eventually(t, "both instances warmed", func() bool {
		return warmed(s, richUUID, richAddr) && warmed(s, otherUUID, otherAddr)
	})
	if n := bootReads(t, s, docs, richAddr); n != 0 {
		t.Errorf("a guest's first boot requests after the warm-up made %d store reads, want 0", n)
	}

	// Off: the first requests read the store, as before.
	docs2 := newFakeDocs()
	docs2.publish(t, richInstance(t))
	o.WarmInstances = -1
	s2 := New(listingDocs{docs2}, o)
	runServer(t, s2)
	if n := bootReads(t, s2, docs2, richAddr); n == 0 {
		t.Error("with WarmInstances < 0 the first boot requests made no store read")
	}
}

// TestWarmOnPublish: an instance published after the start is read into
// the cache from the change feed (another replica's publish) or from
// Invalidate (hostctl's own), ahead of its guest.
func TestWarmOnPublish(t *testing.T) {
	docs := newFakeDocs()
	o := testOptions(at("2026-01-01"))
	o.SweepInterval = -1
	s := New(docs, o)
	runServer(t, s)
	eventually(t, "subscription", func() bool { return docs.subscribers() == 1 })

	in := richInstance(t)
	docs.publish(t, in)
	docs.send(store.Change{UUID: in.UUID, Version: docs.version(in.UUID), Addresses: in.Addresses})
	eventually(t, "warmed from the feed", func() bool { return warmed(s, richUUID, richAddr) })
	if n := bootReads(t, s, docs, richAddr); n != 0 {
		t.Errorf("first boot requests after a publish on the feed made %d store reads, want 0", n)
	}

	republish(t, docs, "web-2")
	s.Invalidate(richUUID)
	eventually(t, "warmed after Invalidate", func() bool {
		v := s.cache.byUUID(richUUID)
		return v != nil && v.version == docs.version(richUUID)
	})
	if h := hostname(s, richAddr); h != "web-2.novalocal" {
		t.Errorf("after the republish: %q", h)
	}
}
