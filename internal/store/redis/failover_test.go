package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
)

// Bounds of the failover test: every wait ends by its deadline, every loop
// by its count.
const (
	failoverDeadline  = 120 * time.Second // for each phase
	failoverMaxWrites = 20000             // per writer (addresses 10.w.x.y)
	acksBeforeKill    = 20                // per writer
	acksAfterSwitch   = 10                // per writer
	readsAfterSwitch  = 10
)

// A primary watched by three sentinels, with one replica, is killed
// (SIGKILL) while two hosts (two store clients) publish instances and
// records and a third client serves guests (address lookups and document
// reads). Writes resume after the failover, and with the default
// durability of a Sentinel URL (min_replicas=1) no write the store
// reported as done is lost. Without it (min_replicas=0) the writes of the
// last moments before the kill may be lost: the test shows how many, but
// cannot assert it (it depends on replication lag at the kill).
//
// Every write is a create (a new instance, a new record), so that a later
// write cannot hide the loss of an earlier one.
func TestFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a Redis primary and waits for a Sentinel failover")
	}
	for _, tc := range []struct {
		name    string
		query   string
		durable bool
	}{
		{"min_replicas=1", "", true},
		{"min_replicas=0", "?min_replicas=0", false},
	} {
		t.Run(tc.name, func(t *testing.T) { testFailover(t, tc.query, tc.durable) })
	}
}

// failoverWriter is one host publishing instances and records.
type failoverWriter struct {
	id    int
	s     *Store
	guest *guestList

	attempted, acked, notDurable, failed atomic.Int64
	ackedAfterSwitch                     atomic.Int64
	// acked writes, for checking after the failover (writer goroutine only
	// until it has stopped).
	instances []failoverInstance
	records   []string
}

type failoverInstance struct{ name, uuid, addr string }

// guestList is the instances guests may ask for: those whose Put was
// acknowledged.
type guestList struct {
	ready chan struct{} // closed when the first instance is added

	mu   sync.Mutex
	list []failoverInstance
}

func newGuestList() *guestList { return &guestList{ready: make(chan struct{})} }

func (g *guestList) add(i failoverInstance) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.list) == 0 {
		close(g.ready)
	}
	g.list = append(g.list, i)
}

func (g *guestList) pick() (failoverInstance, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.list) == 0 {
		return failoverInstance{}, false
	}
	return g.list[rand.IntN(len(g.list))], true
}

// run publishes until stop is closed; switched tells whether the failover
// has happened.
func (w *failoverWriter) run(ctx context.Context, stop <-chan struct{}, switched *atomic.Bool) {
	for seq := range failoverMaxWrites {
		select {
		case <-stop:
			return
		default:
		}
		after := switched.Load()
		inst := failoverInstance{
			name: fmt.Sprintf("host%d-vm%d", w.id, seq),
			uuid: fmt.Sprintf("uuid-%d-%d", w.id, seq),
			addr: fmt.Sprintf("10.%d.%d.%d", w.id, seq/256, seq%256),
		}
		w.attempted.Add(1)
		_, _, err := w.s.Put(ctx, store.Instance{Name: inst.name, UUID: inst.uuid, Addresses: []string{inst.addr}, Spec: []byte(`{}`)},
			store.Document{Addresses: []string{inst.addr}, Tree: []byte(inst.name)}, 0)
		if w.count(err, after) {
			w.instances = append(w.instances, inst)
			w.guest.add(inst)
		}
		key := fmt.Sprintf("failover/host%d/%d", w.id, seq)
		w.attempted.Add(1)
		_, err = w.s.PutRecord(ctx, key, []byte(inst.name), 0)
		if w.count(err, after) {
			w.records = append(w.records, key)
		}
	}
}

// count counts a write's outcome and reports whether it was acknowledged.
func (w *failoverWriter) count(err error, afterSwitch bool) bool {
	switch {
	case err == nil:
		w.acked.Add(1)
		if afterSwitch {
			w.ackedAfterSwitch.Add(1)
		}
		return true
	case errors.Is(err, ErrNotDurable):
		w.notDurable.Add(1)
	default:
		w.failed.Add(1)
	}
	return false
}

// guestReader serves guests: an address lookup and a document read per
// request.
type guestReader struct {
	s     *Store
	guest *guestList

	reads, failed, notFound, okAfterSwitch atomic.Int64
}

func (r *guestReader) run(ctx context.Context, stop <-chan struct{}, switched *atomic.Bool) {
	select {
	case <-r.guest.ready:
	case <-stop:
		return
	}
	for range 50 * failoverMaxWrites {
		select {
		case <-stop:
			return
		default:
		}
		inst, _ := r.guest.pick()
		after := switched.Load()
		r.reads.Add(1)
		uuid, err := r.s.LookupAddress(ctx, inst.addr)
		var doc store.Document
		if err == nil {
			doc, err = r.s.Document(ctx, uuid)
		}
		switch {
		case errors.Is(err, store.ErrNotFound):
			r.notFound.Add(1)
		case err != nil:
			r.failed.Add(1)
		case doc.InstanceUUID != inst.uuid || string(doc.Tree) != inst.name:
			r.notFound.Add(1) // another instance's document: as good as lost
		case after:
			r.okAfterSwitch.Add(1)
		}
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(failoverDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, failoverDeadline)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testFailover(t *testing.T, query string, durable bool) {
	sen := testenv.StartRedisSentinels(t)
	ctx := t.Context()

	// The failover's end, as the sentinels announce it.
	sub := goredis.NewClient(&goredis.Options{Addr: sen.Sentinel.Addr(), MaintNotificationsConfig: disabledMaint()})
	defer sub.Close()
	ps := sub.Subscribe(ctx, "+switch-master")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatalf("subscribe to +switch-master: %v", err)
	}

	open := func() *Store {
		s, err := Open(ctx, sen.URL()+query, WithLockLease(3*time.Second))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	guest := newGuestList()
	writers := []*failoverWriter{{id: 1, s: open(), guest: guest}, {id: 2, s: open(), guest: guest}}
	reader := &guestReader{s: open(), guest: guest}
	if n, _ := writers[0].s.Replicas(); durable != (n == 1) {
		t.Fatalf("Replicas() = %d with %q", n, query)
	}

	stop := make(chan struct{})
	var switched atomic.Bool
	var wg sync.WaitGroup
	for _, w := range writers {
		wg.Go(func() { w.run(ctx, stop, &switched) })
	}
	wg.Go(func() { reader.run(ctx, stop, &switched) })
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer halt()

	waitFor(t, "writes before the kill", func() bool {
		return writers[0].acked.Load() >= acksBeforeKill && writers[1].acked.Load() >= acksBeforeKill
	})
	killedAt := time.Now()
	sen.Master.Stop() // SIGKILL

	msgs := ps.Channel()
	select {
	case msg := <-msgs:
		// "<master> <old ip> <old port> <new ip> <new port>"
		if want := strings.ReplaceAll(sen.Replica.Addr(), ":", " "); !strings.HasSuffix(msg.Payload, want) {
			t.Fatalf("+switch-master %q, want the replica %s promoted", msg.Payload, sen.Replica.Addr())
		}
	case <-time.After(failoverDeadline):
		t.Fatalf("no +switch-master within %s of killing the primary", failoverDeadline)
	}
	switched.Store(true)
	t.Logf("failover done %s after the kill", time.Since(killedAt).Round(time.Millisecond))
	// The old primary comes back empty; the sentinels make it a replica of
	// the new one, so that writes can be acknowledged again.
	sen.Master.Start()

	waitFor(t, "writes and reads after the failover", func() bool {
		return writers[0].ackedAfterSwitch.Load() >= acksAfterSwitch && writers[1].ackedAfterSwitch.Load() >= acksAfterSwitch &&
			reader.okAfterSwitch.Load() >= readsAfterSwitch
	})
	halt()

	// Which acknowledged writes are still there, read through a new client.
	check := open()
	var attempted, acked, notDurable, failed, found int64
	for _, w := range writers {
		attempted += w.attempted.Load()
		acked += w.acked.Load()
		notDurable += w.notDurable.Load()
		failed += w.failed.Load()
		for _, inst := range w.instances {
			uuid, err := check.LookupAddress(ctx, inst.addr)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				t.Fatalf("LookupAddress(%s): %v", inst.addr, err)
			}
			got, err := check.Instance(ctx, inst.name)
			if err == nil && uuid == inst.uuid && got.UUID == inst.uuid {
				found++
			} else if !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("Instance(%s) = %+v, %v (address -> %s)", inst.name, got, err, uuid)
			}
		}
		for _, key := range w.records {
			if _, err := check.Record(ctx, key); err == nil {
				found++
			} else if !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("Record(%s): %v", key, err)
			}
		}
	}
	t.Logf("writes attempted %d, acknowledged %d (%d after the failover), acknowledged and found after the failover %d, "+
		"refused as not durable %d, failed otherwise %d", attempted, acked,
		writers[0].ackedAfterSwitch.Load()+writers[1].ackedAfterSwitch.Load(), found, notDurable, failed)
	t.Logf("guest reads %d, failed %d, acknowledged instance not found %d", reader.reads.Load(), reader.failed.Load(), reader.notFound.Load())
	if durable {
		if found != acked {
			t.Errorf("%d of %d acknowledged writes lost in the failover", acked-found, acked)
		}
		if n := reader.notFound.Load(); n != 0 {
			t.Errorf("guests did not find an acknowledged instance %d times", n)
		}
	} else {
		if found > acked {
			t.Errorf("found %d acknowledged writes of %d", found, acked)
		}
		t.Logf("without waiting for replicas: %d acknowledged writes lost", acked-found)
	}
}
