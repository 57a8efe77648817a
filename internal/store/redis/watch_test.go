package redis

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/storetest"
	"github.com/vmeta/vmeta/internal/testenv"
)

// killPubSub disconnects every pub/sub client (on every primary), as a
// network blip or a server-side client-output-buffer limit would, and
// returns how many it killed.
func killPubSub(t *testing.T, s *Store) int64 {
	t.Helper()
	var killed atomic.Int64
	kill := func(ctx context.Context, c goredis.Cmdable) error {
		n, err := c.ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
		killed.Add(n)
		return err
	}
	var err error
	if c, ok := s.rdb.(*goredis.ClusterClient); ok {
		err = c.ForEachMaster(t.Context(), func(ctx context.Context, n *goredis.Client) error { return kill(ctx, n) })
	} else {
		err = kill(t.Context(), s.rdb)
	}
	if err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
	}
	return killed.Load()
}

// A subscription dropped by the server is re-established by itself, and
// the watcher is told to resync (it may have missed changes); later
// changes arrive again.
func TestWatchResyncAfterClientKill(t *testing.T) {
	for _, tc := range []struct{ name, url string }{
		{"single", testenv.StartRedis(t)},
		{"cluster", testenv.ClusterURL(testenv.StartRedisCluster(t))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openFlushed(t, tc.url)
			defer s.Close()
			peer := openPeer(t, tc.url)
			ch, err := s.Watch(t.Context())
			if err != nil {
				t.Fatalf("Watch: %v", err)
			}
			in := store.Instance{Name: "vm", UUID: "u-1", Addresses: []string{"10.0.0.1"}, Spec: []byte(`{}`)}
			put := func(rev int64) {
				t.Helper()
				if _, _, err := peer.Put(t.Context(), in, store.Document{Tree: []byte("t")}, rev); err != nil {
					t.Fatalf("Put: %v", err)
				}
			}
			put(0)
			storetest.WantChange(t, storetest.NextFor(t, ch, in.UUID), in.UUID, 1, "10.0.0.1")

			for round := range 3 {
				if n := killPubSub(t, s); n < 1 {
					t.Fatalf("round %d: CLIENT KILL TYPE pubsub killed %d clients, want the watcher's", round, n)
				}
				// Whatever was delivered before the resync is fine; after it
				// the feed is live again.
				storetest.WaitResync(t, ch)
				put(int64(round + 1))
				storetest.WantChange(t, storetest.NextFor(t, ch, in.UUID), in.UUID, int64(round+2), "10.0.0.1")
			}
		})
	}
}

// With Redis gone, Ping and writes fail (they do not hang); once it is
// back, Ping succeeds, the watcher gets a Resync and then the changes made
// since.
func TestWatchResyncAfterRestart(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	s := openFlushed(t, srv.URL())
	defer s.Close()
	ch, err := s.Watch(t.Context())
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	in := store.Instance{Name: "vm", UUID: "u-1", Addresses: []string{"10.0.0.1"}, Spec: []byte(`{}`)}
	if _, _, err := s.Put(t.Context(), in, store.Document{}, 0); err != nil {
		t.Fatalf("Put: %v", err)
	}
	storetest.WantChange(t, storetest.Next(t, ch), in.UUID, 1, "10.0.0.1")

	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping with the server down succeeded")
	} else {
		t.Logf("Ping while down: %v", err)
	}
	if _, _, err := s.Put(ctx, in, store.Document{}, -1); err == nil {
		t.Fatal("Put with the server down succeeded")
	}
	srv.Start()
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping after restart: %v", err)
	}
	storetest.WaitResync(t, ch)
	// The restarted server is empty (nothing is persisted).
	if _, _, err := s.Put(t.Context(), in, store.Document{}, 0); err != nil {
		t.Fatalf("Put after restart: %v", err)
	}
	storetest.WantChange(t, storetest.Next(t, ch), in.UUID, 1, "10.0.0.1")
}

// A server that hangs (connections open, nothing answered) is noticed by
// the health ping; the watcher resubscribes once it answers again and
// sends a Resync.
func TestWatchResyncAfterHang(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	s := openFlushed(t, srv.URL(), withWatchTimeouts(100*time.Millisecond, 300*time.Millisecond))
	defer s.Close()
	ch, err := s.Watch(t.Context())
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	srv.Pause()
	time.Sleep(time.Second)
	srv.Resume()
	storetest.WaitResync(t, ch)
	in := store.Instance{Name: "vm", UUID: "u-1", Spec: []byte(`{}`)}
	if _, _, err := s.Put(t.Context(), in, store.Document{}, 0); err != nil {
		t.Fatalf("Put: %v", err)
	}
	storetest.WantChange(t, storetest.Next(t, ch), in.UUID, 1)
}

// Close ends every watcher's channel.
func TestCloseEndsWatch(t *testing.T) {
	s := openFlushed(t, testenv.StartRedis(t))
	ch, err := s.Watch(t.Context())
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	s.Close()
	select {
	case _, ok := <-ch:
		for ok {
			_, ok = <-ch
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch channel still open 10s after Close")
	}
	if _, err := s.Watch(t.Context()); err == nil {
		t.Fatal("Watch on a closed store succeeded")
	}
}

// A message that is not a change (someone else publishing on the channel)
// makes the watcher resync rather than guess.
func TestWatchUndecodableMessage(t *testing.T) {
	s := openFlushed(t, testenv.StartRedis(t))
	defer s.Close()
	ch, err := s.Watch(t.Context())
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	if err := s.rdb.Publish(t.Context(), changesChannel, "not json").Err(); err != nil {
		t.Fatal(err)
	}
	if before := storetest.WaitResync(t, ch); len(before) != 0 {
		t.Fatalf("changes before the resync: %+v", before)
	}
}

func TestDecodeChange(t *testing.T) {
	c, err := decodeChange(`{"uuid":"u","version":3,"old":["10.0.0.1","10.0.0.2"],"new":["10.0.0.2","10.0.0.3"]}`)
	if err != nil {
		t.Fatal(err)
	}
	storetest.WantChange(t, c, "u", 3, "10.0.0.1", "10.0.0.2", "10.0.0.3")
	for _, bad := range []string{``, `{}`, `[1]`, `{"uuid":"u","version":"x"}`} {
		if _, err := decodeChange(bad); err == nil {
			t.Errorf("decodeChange(%q) succeeded", bad)
		}
	}
}
