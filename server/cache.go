package server

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmeta/vmeta/internal/store"
)

// cache holds the views of the instances guests have asked for, by UUID
// and by source address. Reads take a read lock and two map lookups at
// most; a miss is filled from the store once however many requests wait
// for it (a hand-written single flight per key). Negative results (unknown
// addresses or instances, store errors) are never cached.
//
// Views leave the cache when they may be stale: on Invalidate (hostctl,
// in-process), on a change from the store's feed, and when the
// convergence sweep finds a document version other than the cached one
// (the feed is at-most-once). A fill that was running when its entry was
// invalidated still answers the requests waiting for it (with what it
// read), but is not cached.
type cache struct {
	// gen moves on every change that can make a view looked up before
	// it stale (a view dropped, a fill made stale, an address mapping
	// dropped): connections' memos of the view they found hold while it
	// stays (connmemo.go). Guests read it on every request and it rarely
	// changes: it has a cache line of its own, away from mu's reader
	// count.
	_   [64]byte
	gen atomic.Uint64
	_   [56]byte

	mu        sync.RWMutex
	views     map[string]*view // instance UUID -> view
	addrs     addrIndex        // source address -> view
	uuidFills map[string]*fill
	addrFills map[netip.Addr]*fill
	// shapes are the directory shapes of the cached views (see
	// shapeTable): a view takes its shapes from here from when it is
	// cached until it is dropped.
	shapes shapeTable
}

// fill is one store read in flight; requests for the same key wait on it.
type fill struct {
	done    chan struct{}
	view    *view
	err     error
	stale   bool // invalidated while running (guarded by cache.mu)
	waiters int  // requests waiting for it besides the one running it (guarded by cache.mu; for tests)
}

func (f *fill) wait(ctx context.Context) (*view, error) {
	select {
	case <-f.done:
		return f.view, f.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func newCache() cache {
	return cache{
		views: map[string]*view{}, addrs: newAddrIndex(),
		uuidFills: map[string]*fill{}, addrFills: map[netip.Addr]*fill{},
	}
}

func (c *cache) size() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.views)
}

func (c *cache) byUUID(uuid string) *view {
	c.mu.RLock()
	v := c.views[uuid]
	c.mu.RUnlock()
	return v
}

func (c *cache) byAddr(a netip.Addr) *view {
	c.mu.RLock()
	v := c.addrs.get(a)
	c.mu.RUnlock()
	return v
}

// putLocked caches a view (in place of the instance's previous one).
func (c *cache) putLocked(v *view) {
	if old := c.views[v.uuid]; old != nil && old != v {
		c.dropLocked(old)
	}
	c.views[v.uuid] = v
	v.adopt(&c.shapes)
}

// dropLocked removes a view and the addresses that point at it, and gives
// back its shapes.
func (c *cache) dropLocked(v *view) {
	c.gen.Add(1)
	if c.views[v.uuid] == v {
		delete(c.views, v.uuid)
		v.release()
	}
	for _, a := range v.addrs {
		if c.addrs.get(a) == v {
			c.addrs.del(a)
		}
	}
}

// staleLocked keeps fills in flight for uuid, and every address fill (an
// address may have moved to or from uuid), from being cached.
func (c *cache) staleLocked(uuid string) {
	c.gen.Add(1)
	if f := c.uuidFills[uuid]; f != nil {
		f.stale = true
	}
	for _, f := range c.addrFills {
		f.stale = true
	}
}

// Invalidate drops what is cached for an instance after it was published
// or deleted (hostctl calls it in-process; other replicas learn of the
// change from the store's feed, see Run).
func (s *Server) Invalidate(uuid string) {
	c := &s.cache
	c.mu.Lock()
	if v := c.views[uuid]; v != nil {
		c.dropLocked(v)
	}
	c.staleLocked(uuid)
	c.mu.Unlock()
	s.warmSoon(uuid, nil)
}

// applyChange handles one message of the store's change feed.
func (s *Server) applyChange(ctx context.Context, ch store.Change) {
	if ch.Resync {
		// Missed changes may include a key rotation; and the store may
		// have lost this reader's record (a Redis restarted empty).
		s.reported.Store("")
		_ = s.ReloadKeys()
		s.sweep(ctx)
		return
	}
	if ch.Key != nil {
		_ = s.ReloadKeys()
		return
	}
	c := &s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.views[ch.UUID]
	if v == nil || ch.Version <= 0 || v.version < ch.Version {
		if v != nil {
			c.dropLocked(v)
		}
		c.staleLocked(ch.UUID)
	}
	if ch.Version > 0 && (v == nil || v.version < ch.Version) {
		defer s.warmSoon(ch.UUID, ch.Addresses) // a send that never blocks
	}
	// An address the instance had or has may be cached for another
	// instance (it moved): drop that mapping.
	for _, addr := range ch.Addresses {
		a, err := netip.ParseAddr(addr)
		if err != nil {
			continue
		}
		a = a.Unmap().WithZone("")
		if av := c.addrs.get(a); av != nil && av.uuid != ch.UUID {
			c.addrs.del(a)
			c.gen.Add(1)
		}
	}
}

// sweep compares the version of every cached view with the store's and
// drops the views that changed or are gone, so that a replica that missed
// a change converges. A store error ends the sweep and changes nothing:
// cached views keep being served while the store is away.
func (s *Server) sweep(ctx context.Context) {
	c := &s.cache
	c.mu.RLock()
	views := make([]*view, 0, len(c.views))
	for _, v := range c.views {
		views = append(views, v)
	}
	c.mu.RUnlock()
	if len(views) == 0 {
		s.checkStore(ctx)
		return
	}
	for len(views) > 0 {
		n := min(len(views), sweepChunk)
		if !s.sweepChunk(ctx, views[:n]) {
			return
		}
		views = views[n:]
	}
}

// sweepChunk is how many versions a sweep reads under one store timeout
// (a context, its timer and a health record per read were a good share
// of a sweep's cost, which lands in whatever requests are being served
// meanwhile: issue 23 item 3). sweepChunk reads of the embedded store
// take a millisecond or two, of Redis a few round trips' time each: far
// below DefaultStoreTimeout.
const sweepChunk = 64

// sweepChunk compares the versions of views with the store's, all within
// one StoreTimeout; false: a store error (or ctx) ended the sweep.
func (s *Server) sweepChunk(ctx context.Context, views []*view) bool {
	c := &s.cache
	sctx, cancel := context.WithTimeout(ctx, s.storeTimeout)
	defer cancel()
	for _, v := range views {
		if ctx.Err() != nil {
			return false
		}
		ver, err := s.docs.DocumentVersion(sctx, v.uuid)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			s.storeResult(err)
			return false
		}
		if err != nil || ver != v.version {
			c.mu.Lock()
			c.dropLocked(v)
			c.staleLocked(v.uuid)
			c.mu.Unlock()
		}
	}
	s.storeResult(nil)
	return true
}

// fillUUID reads an instance's view from the store (once for all the
// requests that miss it at the same time) and caches it.
func (s *Server) fillUUID(ctx context.Context, uuid string) (*view, error) {
	c := &s.cache
	c.mu.Lock()
	if v := c.views[uuid]; v != nil {
		c.mu.Unlock()
		return v, nil
	}
	f, running := c.uuidFills[uuid]
	if running {
		f.waiters++
	} else {
		f = &fill{done: make(chan struct{})}
		c.uuidFills[uuid] = f
	}
	c.mu.Unlock()
	if running {
		return f.wait(ctx)
	}

	// The fill serves every waiter: it must not end with the request
	// that happened to start it.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.storeTimeout)
	defer cancel()
	doc, err := s.docs.Document(fctx, uuid)
	s.storeResult(err)
	var v *view
	if err == nil {
		doc.InstanceUUID = uuid
		s.warnProxyAddresses(uuid, doc.Addresses)
		v, err = buildView(doc, s.policyFor(doc))
		if err != nil {
			err = &corruptError{uuid: uuid, err: err}
		}
	}
	c.mu.Lock()
	delete(c.uuidFills, uuid)
	if err == nil && !f.stale {
		c.putLocked(v)
	}
	c.mu.Unlock()
	f.view, f.err = v, err
	close(f.done)
	return v, err
}

// fillAddr finds the instance owning a source address and its view in
// the store (once for all the requests that miss it at the same time) and
// caches both.
func (s *Server) fillAddr(ctx context.Context, a netip.Addr) (*view, error) {
	c := &s.cache
	c.mu.Lock()
	if v := c.addrs.get(a); v != nil {
		c.mu.Unlock()
		return v, nil
	}
	f, running := c.addrFills[a]
	if running {
		f.waiters++
	} else {
		f = &fill{done: make(chan struct{})}
		c.addrFills[a] = f
	}
	c.mu.Unlock()
	if running {
		return f.wait(ctx)
	}

	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.storeTimeout)
	defer cancel()
	uuid, err := s.docs.LookupAddress(fctx, a.String())
	s.storeResult(err)
	var v *view
	if err == nil {
		v = s.cache.byUUID(uuid)
		if v == nil {
			v, err = s.fillUUID(fctx, uuid)
		}
	}
	c.mu.Lock()
	delete(c.addrFills, a)
	if err == nil && !f.stale && c.views[uuid] == v {
		c.addrs.set(a, v)
		v.addrs = append(v.addrs, a)
	}
	c.mu.Unlock()
	f.view, f.err = v, err
	close(f.done)
	return v, err
}

// corruptError is a published document the server cannot serve (it does
// not decode, or lacks a version): a 500, not a store outage.
type corruptError struct {
	uuid string
	err  error
}

func (e *corruptError) Error() string { return "document of " + e.uuid + ": " + e.err.Error() }
func (e *corruptError) Unwrap() error { return e.err }

// Run follows the store's change feed (when the store has one, see
// Watcher) and sweeps the cache every SweepInterval, until ctx is done.
// It reloads the key files (Options.KeyFiles) when the feed announces a
// key rotation or a resync, and every KeyCheckInterval.
// Without Run, cached views change only through Invalidate. After the
// feed breaks it is re-subscribed with back-off, and the cache swept,
// since changes may have been missed meanwhile.
func (s *Server) Run(ctx context.Context) error {
	defer gcFloorStart(s.gcHeapFloor, s.log)()
	var (
		feed    <-chan store.Change
		retry   <-chan time.Time
		backoff = 100 * time.Millisecond
	)
	// This reader's record of the keys it has loaded, before the feed is
	// followed: a rotation announced before the subscription is found by
	// the reload after it, which rewrites the record.
	var heartbeat <-chan time.Time
	if s.keyRecords() != nil {
		s.reportKeys(ctx)
		defer s.forgetKeys()
		t := time.NewTicker(s.heartbeat)
		defer t.Stop()
		heartbeat = t.C
	}
	warmed := make(chan struct{})
	defer func() { <-warmed }()
	go func() {
		defer close(warmed)
		s.warmer(ctx, s.warmN)
	}()
	w, watching := s.docs.(Watcher)
	lw, ok := s.docs.(LosslessWatcher)
	lossless := ok && lw.LosslessFeed()
	subscribe := func() {
		ch, err := w.Watch(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.storeResult(err)
				s.log.Debug("metadata change feed: subscribe failed", "err", err, "retry_in", backoff)
			}
			retry = time.After(backoff)
			backoff = min(2*backoff, 30*time.Second)
			return
		}
		feed = ch
		// Changes made before the subscription was in place were missed
		// (key rotations too).
		_ = s.ReloadKeys()
		s.sweep(ctx)
		// After the reload: from here on a key file changes what is
		// loaded only through the feed, the key check timer or SIGHUP
		// (tests wait for this line).
		s.log.Info("metadata change feed: following")
	}
	if watching {
		subscribe()
	}
	var tick, keyTick <-chan time.Time
	if s.sweepInterval > 0 {
		t := time.NewTicker(s.sweepInterval)
		defer t.Stop()
		tick = t.C
	}
	if s.keyCheck > 0 && len(s.keyFiles) > 0 {
		t := time.NewTicker(s.keyCheck)
		defer t.Stop()
		keyTick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ch, ok := <-feed:
			if !ok {
				feed = nil
				if ctx.Err() != nil {
					return nil
				}
				s.log.Debug("metadata change feed closed; re-subscribing", "in", backoff)
				retry = time.After(backoff)
				backoff = min(2*backoff, 30*time.Second)
				continue
			}
			backoff = 100 * time.Millisecond
			s.applyChange(ctx, ch)
		case <-retry:
			retry = nil
			subscribe()
		case <-keyTick:
			_ = s.ReloadKeys()
		case <-heartbeat:
			s.reportKeys(ctx)
		case <-tick:
			if lossless && feed != nil {
				// Nothing was missed (a loss would have come as a
				// Resync, which sweeps).
				_ = s.checkStore(ctx)
			} else {
				s.sweep(ctx)
			}
			if s.limiter != nil {
				s.limiter.prune()
			}
		}
	}
}

// ReloadKeys re-reads every key file (Options.KeyFiles) whose content
// changed, replacing the keys in use; a file that cannot be read or
// parsed keeps its keys (the error is logged and returned). The replica
// calls it on SIGHUP; Run calls it on key rotations.
//
// When what is loaded changed it rewrites this reader's record of the generations it
// has loaded (KeyReaderPrefix), which key rotations wait for.
func (s *Server) ReloadKeys() error {
	var errs []error
	for _, f := range s.keyFiles {
		if _, err := f.Reload(); err != nil {
			errs = append(errs, err)
		}
	}
	// The files may also have been loaded by a key rotation in this
	// process (KeyFile.Reload): report what differs from the last report.
	if s.keysState() != s.reported.Load() {
		s.reportKeys(context.Background())
	}
	return errors.Join(errs...)
}

// addrIndex maps source addresses to views. IPv4 addresses, nearly every
// guest's, are keyed by their 32 bits: the runtime hashes and compares
// such a key in an instruction or two, where a netip.Addr (24 bytes with
// its zone) takes its generic hash and compare, and a map slot of it
// spans more cache lines (issue 23 item 3: in a boot storm every lookup
// misses the caches). Other addresses are keyed by themselves. Addresses
// are unmapped and without zone (peerAddr), so each has one key.
type addrIndex struct {
	v4    map[uint32]*view
	other map[netip.Addr]*view
}

func newAddrIndex() addrIndex {
	return addrIndex{v4: map[uint32]*view{}, other: map[netip.Addr]*view{}}
}

func v4Key(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func (x *addrIndex) get(a netip.Addr) *view {
	if a.Is4() {
		return x.v4[v4Key(a)]
	}
	return x.other[a]
}

func (x *addrIndex) set(a netip.Addr, v *view) {
	if a.Is4() {
		x.v4[v4Key(a)] = v
		return
	}
	x.other[a] = v
}

func (x *addrIndex) del(a netip.Addr) {
	if a.Is4() {
		delete(x.v4, v4Key(a))
		return
	}
	delete(x.other, a)
}

func (x *addrIndex) len() int { return len(x.v4) + len(x.other) }
