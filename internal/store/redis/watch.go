package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/internal/feed"
)

// changesChannel is the pub/sub channel the write scripts publish on.
const changesChannel = prefix + "changes"

// wireChange is the message the scripts publish: the addresses before and
// after the change are sent apart (each is a JSON list the Go side wrote)
// and merged here.
//
// A key rotation (NotifyKey) is published as {"key":{"class":…,
// "generation":…}} with no uuid: a reader of an older version takes it for
// a garbled message and resyncs, which is harmless.
type wireChange struct {
	UUID    string            `json:"uuid"`
	Version int64             `json:"version"`
	Old     []string          `json:"old"`
	New     []string          `json:"new"`
	Key     *store.KeyVersion `json:"key,omitempty"`
}

func decodeChange(payload string) (store.Change, error) {
	var w wireChange
	if err := json.Unmarshal([]byte(payload), &w); err != nil {
		return store.Change{}, err
	}
	if w.Key != nil {
		if w.Key.Class == "" {
			return store.Change{}, errors.New("key change without a class")
		}
		return store.Change{Key: w.Key}, nil
	}
	if w.UUID == "" {
		return store.Change{}, errors.New("no uuid")
	}
	return store.Change{UUID: w.UUID, Version: w.Version, Addresses: union(w.Old, w.New)}, nil
}

// union returns the strings in a or b, each once, a's first.
func union(a, b []string) []string {
	out := make([]string, 0, len(a)+len(b))
	seen := make(map[string]bool, len(a)+len(b))
	for _, list := range [][]string{a, b} {
		for _, x := range list {
			if !seen[x] {
				seen[x] = true
				out = append(out, x)
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Watch implements store.Store with a SUBSCRIBE to the changes channel on
// a connection of its own (one per call). It returns once Redis has
// confirmed the subscription, so every change committed after Watch
// returns is delivered unless the connection drops. On a Redis Cluster a
// change is published on the node of the instance's slot and relayed to
// the subscriber's node over the cluster bus, so a change committed just
// before Watch returned may still arrive too; changes of one instance
// arrive in order.
//
// Delivery is at most once. go-redis reconnects and re-subscribes by itself
// after a connection error; Watch also pings a silent subscription every
// DefaultHealthInterval and, when the answer does not come, starts a new
// one. Every confirmation of a subscription other than the first means that
// messages may have been published while there was none, and is turned
// into a Change{Resync: true}, sent after the new subscription is active:
// a reader that re-checks everything it caches when it receives it (by
// DocumentVersion) misses nothing. A watcher that does not keep up also
// gets a Resync (see internal/store/internal/feed).
func (s *Store) Watch(ctx context.Context) (<-chan store.Change, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	ps, err := s.subscribe(ctx)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", s.addr, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(s.closing, cancel)
	sink := feed.New(ctx, feed.DefaultSize, nil)
	w := &watcher{s: s, ps: ps, sink: sink}
	// Closing the subscription is what interrupts a blocked Receive.
	stopClose := context.AfterFunc(ctx, w.closeSub)
	go func() {
		defer cancel()
		defer stopOnClose()
		defer stopClose()
		defer sink.Close()
		w.loop(ctx)
		w.closeSub()
	}()
	return sink.C(), nil
}

// subscribe subscribes on a new connection and waits for the
// confirmation.
func (s *Store) subscribe(ctx context.Context) (*goredis.PubSub, error) {
	ps := s.rdb.Subscribe(ctx, changesChannel)
	msg, err := ps.ReceiveTimeout(ctx, s.opts.subscribeTimeout)
	if err == nil {
		if _, ok := msg.(*goredis.Subscription); !ok {
			err = fmt.Errorf("unexpected first message %T", msg)
		}
	}
	if err != nil {
		ps.Close()
		return nil, fmt.Errorf("subscribe to %s: %w", changesChannel, err)
	}
	return ps, nil
}

type watcher struct {
	s    *Store
	sink *feed.Sink

	// The subscription is replaced by loop and closed from another
	// goroutine (context.AfterFunc), hence a lock.
	mu sync.Mutex
	ps *goredis.PubSub
}

func (w *watcher) closeSub() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ps.Close()
}

func (w *watcher) loop(ctx context.Context) {
	pinged := false
	failures := 0
	for ctx.Err() == nil {
		w.mu.Lock()
		ps := w.ps
		w.mu.Unlock()
		msg, err := ps.ReceiveTimeout(ctx, w.s.opts.healthInterval)
		if ctx.Err() != nil {
			return
		}
		var nerr net.Error
		switch {
		case err == nil:
			failures = 0
			pinged = false
		case errors.As(err, &nerr) && nerr.Timeout():
			if !pinged {
				// Silence: ask for a PONG. go-redis reconnects by itself
				// when the PING cannot be written.
				pinged = true
				_ = ps.Ping(ctx)
				continue
			}
			// No answer for two intervals: the connection is dead without
			// knowing it. Start over on a new one.
			pinged = false
			w.resubscribe(ctx)
			continue
		case isRedisError(err):
			// Redis answered with an error reply (e.g. NOPERM after an ACL
			// change refused the re-SUBSCRIBE). go-redis keeps such a
			// connection, which now carries no subscription, and its
			// PINGs still succeed: start a fresh subscription instead.
			slog.Warn("redis store: change feed subscription refused; retrying", "err", err)
			pinged = false
			w.resubscribe(ctx)
			continue
		default:
			// go-redis has dropped the connection and reconnects (and
			// re-subscribes) on the next Receive; the confirmation it then
			// gets is the signal to resync. Back off while Redis is away.
			failures++
			pinged = false
			if !sleep(ctx, min(time.Duration(failures)*100*time.Millisecond, time.Second)) {
				return
			}
			continue
		}
		switch m := msg.(type) {
		case *goredis.Subscription:
			if m.Kind == "subscribe" {
				w.sink.Resync()
			}
		case *goredis.Message:
			c, err := decodeChange(m.Payload)
			if err != nil {
				// Not ours, or garbled: the reader must re-check.
				slog.Warn("redis store: undecodable change message", "channel", m.Channel, "err", err)
				w.sink.Resync()
				continue
			}
			w.sink.Send(c)
		case *goredis.Pong:
		}
	}
}

// resubscribe replaces a dead subscription with a new one; the new one's
// confirmation is consumed here, so the Resync is sent here.
func (w *watcher) resubscribe(ctx context.Context) {
	for ctx.Err() == nil {
		ps, err := w.s.subscribe(ctx)
		if err == nil {
			w.mu.Lock()
			old := w.ps
			w.ps = ps
			w.mu.Unlock()
			old.Close()
			w.sink.Resync()
			return
		}
		if !sleep(ctx, time.Second) {
			return
		}
	}
}

// isRedisError reports whether err is an error reply from Redis rather
// than a network failure.
func isRedisError(err error) bool {
	var rerr goredis.Error
	return errors.As(err, &rerr)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// NotifyKey implements store.KeyNotifier: it publishes the key version on
// the changes channel, which every Watch of any client receives (on a
// Redis Cluster, PUBLISH reaches every node's subscribers).
func (s *Store) NotifyKey(ctx context.Context, k store.KeyVersion) error {
	if k.Class == "" {
		return fmt.Errorf("notify key: class is empty")
	}
	msg, err := json.Marshal(struct {
		Key store.KeyVersion `json:"key"`
	}{k})
	if err != nil {
		return fmt.Errorf("notify key %s: %w", k.Class, err)
	}
	if err := s.rdb.Publish(ctx, changesChannel, msg).Err(); err != nil {
		return fmt.Errorf("notify key %s on %s: %w", k.Class, s.addr, err)
	}
	return nil
}

// Ping implements store.Store: every primary must answer (on a cluster,
// each shard's primary; with Sentinel, the current primary).
func (s *Store) Ping(ctx context.Context) error {
	if err := s.ping(ctx); err != nil {
		return fmt.Errorf("ping redis store %s: %w", s.addr, err)
	}
	return nil
}

func (s *Store) ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c, ok := s.rdb.(*goredis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
			if err := n.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("%s: %w", n.Options().Addr, err)
			}
			return nil
		})
	}
	return s.rdb.Ping(ctx).Err()
}
