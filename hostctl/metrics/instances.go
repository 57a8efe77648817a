package metrics

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/vmeta/vmeta/internal/store"
)

// InstanceStater gives the state each instance record is counted under,
// the one instance list shows, without decoding its spec (view.States).
type InstanceStater interface {
	InstanceStates(ctx context.Context, recs []store.Instance) ([]string, error)
}

// InstanceStore is what vmeta_host_instances reads from the store when it
// follows the change feed (Sources.Store): the feed, the listing of every
// record and the record of one instance.
type InstanceStore interface {
	store.Watcher
	Instances(ctx context.Context) ([]store.Instance, error)
	Instance(ctx context.Context, name string) (store.Instance, error)
}

// instanceCache keeps the part of every instance record that
// vmeta_host_instances counts by (name, UUID, owning host), and brings it
// up to date at each scrape from the store's change feed: nothing is
// read when nothing changed, one record when one instance was
// republished, nothing for a delete; every record is listed again only
// for what the feed cannot name (a new instance, whose name only a
// listing gives; a Resync; a feed that ended or may have overflowed).
//
// bolt's feed is handed every change before Put or Delete returns, so a
// scrape sees every write made before it; redis's comes a moment later
// (pub/sub), as it does for the metadata service's caches.
type instanceCache struct {
	st InstanceStore

	mu      sync.Mutex
	feed    <-chan store.Change // nil: not watching
	cancel  context.CancelFunc
	full    bool                      // list every record again
	byUUID  map[string]store.Instance // Name, UUID, Host and Revision only
	changed map[string]int64          // UUID -> document version (0: deleted), from the feed
	recs    []store.Instance          // byUUID's values; replaced, never changed in place
	stale   bool                      // recs must be made again from byUUID
}

func newInstanceCache(st InstanceStore) *instanceCache {
	return &instanceCache{st: st, full: true, byUUID: map[string]store.Instance{}, changed: map[string]int64{}}
}

// records returns every instance record (name, UUID, host and revision
// only), brought up to date from the feed. The slice is shared: callers
// must not change it.
func (c *instanceCache) records(ctx context.Context) ([]store.Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.feed == nil {
		// Watch before listing, so that nothing written after the listing
		// is missed. Without a feed every scrape lists.
		wctx, cancel := context.WithCancel(context.Background())
		if feed, err := c.st.Watch(wctx); err == nil {
			c.feed, c.cancel = feed, cancel
		} else {
			cancel()
		}
		c.full = true
	}
	c.drain()
	if !c.full {
		if err := c.applyChanges(ctx); err != nil {
			return nil, err
		}
	}
	if c.full {
		if err := c.listAll(ctx); err != nil {
			return nil, err
		}
	}
	if c.stale {
		recs := make([]store.Instance, 0, len(c.byUUID))
		for _, r := range c.byUUID {
			recs = append(recs, r)
		}
		c.recs, c.stale = recs, false
	}
	return c.recs, nil
}

// drain takes what the feed holds now, without waiting.
func (c *instanceCache) drain() {
	if c.feed == nil {
		return
	}
	for n := 0; ; n++ {
		if n >= cap(c.feed) {
			// As many as the feed's buffer holds: it may have dropped
			// changes whose Resync is not delivered yet.
			c.full = true
		}
		select {
		case ch, ok := <-c.feed:
			if !ok { // the store closed, or the watch failed
				c.cancel()
				c.feed, c.cancel, c.full = nil, nil, true
				return
			}
			switch {
			case ch.Resync:
				c.full = true
			case ch.UUID != "":
				c.changed[ch.UUID] = ch.Version
			}
		default:
			return
		}
	}
}

// applyChanges reads the records of the changed instances it knows (by
// name); one it does not know sets full.
func (c *instanceCache) applyChanges(ctx context.Context) error {
	for uuid, version := range c.changed {
		if c.full {
			return nil // the listing reads them all
		}
		old, known := c.byUUID[uuid]
		switch {
		case version == 0:
			if known {
				delete(c.byUUID, uuid)
				c.stale = true
			}
		case !known:
			c.full = true // a new instance: only the listing names it
		default:
			rec, err := c.st.Instance(ctx, old.Name)
			switch {
			case errors.Is(err, store.ErrNotFound): // deleted since; its delete is in the feed too
				delete(c.byUUID, uuid)
				c.stale = true
			case err != nil:
				return fmt.Errorf("instance %s: %w", old.Name, err) // changed stays: read again next time
			case rec.UUID != uuid:
				c.full = true // the name is another instance's now
			default:
				c.byUUID[uuid] = header(rec)
				c.stale = true
			}
		}
		delete(c.changed, uuid)
	}
	return nil
}

// listAll reads every record again.
func (c *instanceCache) listAll(ctx context.Context) error {
	recs, err := c.st.Instances(ctx)
	if err != nil {
		return err
	}
	clear(c.byUUID)
	for _, r := range recs {
		c.byUUID[r.UUID] = header(r)
	}
	clear(c.changed)
	c.full, c.stale = false, true
	return nil
}

// header is what the cache keeps of a record.
func header(r store.Instance) store.Instance {
	return store.Instance{Name: r.Name, UUID: r.UUID, Host: r.Host, Revision: r.Revision}
}
