package controller_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/hosts/hoststest"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/nics"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// TestApplyRefusesAnotherInstancesMAC: a NIC MAC address names one NIC;
// a spec giving a NIC the MAC of another instance's NIC is refused (409,
// naming the field, the MAC and the other instance) and nothing is
// stored, while re-applying the owner keeps working and the MAC is free
// again once its owner is deleted.
func TestApplyRefusesAnotherInstancesMAC(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := stores.BoltIn(t, dir)
	c := macController(st, dir) // the nics part checks the MACs (hostctl/parts/nics)
	if _, err := c.Apply(ctx, []byte(spec)); err != nil {
		t.Fatal(err)
	}
	second := "name: app-2\naddresses: [10.1.0.8]\nnics: [{mac: \"52:54:00:00:00:09\"}, {mac: \"52:54:00:00:00:01\"}]\n"
	_, err := c.Apply(ctx, []byte(second))
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), `nics[1].mac: "52:54:00:00:00:01"`) || !strings.Contains(err.Error(), "app-1") {
		t.Fatalf("second instance with app-1's MAC: err = %v, want a conflict on nics[1].mac naming app-1", err)
	}
	if _, err := st.Instance(ctx, "app-2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused instance was stored: %v", err)
	}
	if _, err := c.Apply(ctx, []byte(spec)); err != nil {
		t.Fatalf("re-applying the MAC's owner: %v", err)
	}
	if err := c.Delete(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Apply(ctx, []byte(second)); err != nil {
		t.Fatalf("the MAC once its owner is deleted: %v", err)
	}
}

// racingStore holds each caller of Instances (the scan a MAC check made
// before it was a claim) until two callers are there or until done is
// closed (one apply already returned): the two applies of
// TestMACConcurrentAppliesOneWins then both check before either writes,
// whatever the scheduler does.
type racingStore struct {
	store.Store
	mu      sync.Mutex
	waiting int
	both    chan struct{}
	done    chan struct{}
}

func (s *racingStore) Instances(ctx context.Context) ([]store.Instance, error) {
	s.mu.Lock()
	s.waiting++
	if s.waiting == 2 {
		close(s.both)
	}
	s.mu.Unlock()
	select {
	case <-s.both:
	case <-s.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Store.Instances(ctx)
}

// TestMACConcurrentAppliesOneWins: two instances applied at once with
// one MAC address (on the real bolt store): exactly one apply wins, the
// other gets the 409 naming the MAC and the winner, and only the winner
// is stored. (Before the MAC claims both scanned the instance records,
// found nothing, and both were stored.)
func TestMACConcurrentAppliesOneWins(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	bs := stores.BoltIn(t, dir)
	st := &racingStore{Store: bs, both: make(chan struct{}), done: make(chan struct{})}
	c := macController(st, dir)
	specs := []string{
		"name: one\naddresses: [10.1.0.21]\nnics: [{mac: \"52:54:00:00:00:77\"}]\n",
		"name: two\naddresses: [10.1.0.22]\nnics: [{mac: \"52:54:00:00:00:77\"}]\n",
	}
	errs := make([]error, len(specs))
	var once sync.Once
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Go(func() {
			_, errs[i] = c.Apply(ctx, []byte(s))
			once.Do(func() { close(st.done) })
		})
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		if err == nil {
			if won >= 0 {
				t.Fatalf("both instances were applied with one MAC address")
			}
			won = i
		}
	}
	if won < 0 {
		t.Fatalf("no apply won: %v", errs)
	}
	winner, loser := []string{"one", "two"}[won], []string{"one", "two"}[1-won]
	if err := errs[1-won]; !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), `nics[0].mac: "52:54:00:00:00:77"`) || !strings.Contains(err.Error(), "instance "+winner) {
		t.Fatalf("the loser's apply: %v; want a conflict on nics[0].mac naming %s", err, winner)
	}
	if _, err := bs.Instance(ctx, loser); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the loser %s was stored: %v", loser, err)
	}
}

// macController is a controller without hypervisor over st, with the
// nics part keeping its MAC claims in st (as the daemon registers it).
func macController(st store.Store, dir string) *controller.Controller {
	log := slog.New(slog.DiscardHandler)
	n := nics.New(nil, "")
	n.UseStore(st, log)
	return controller.New(st, controller.Options{DataDir: dir, Logger: log, Parts: []part.Part{n}})
}

// TestMACClaimsAcrossHosts: the MAC claims are the store's, not a
// host's: another host sharing the store is refused the MAC; the host
// that adopts the instance carries its claim (its apply passes, the
// claim record unchanged); a force-delete from the store releases it
// (the MAC is free again); a NIC whose MAC changes on re-apply lets go
// of the old one.
func TestMACClaimsAcrossHosts(t *testing.T) {
	ctx := context.Background()
	st := stores.Bolt(t)
	live := &hoststest.Liveness{}
	cs := map[string]*controller.Controller{}
	for _, h := range []string{"host-a", "host-b"} {
		n := nics.New(nil, "")
		n.UseStore(st, slog.New(slog.DiscardHandler))
		cs[h] = controller.New(st, controller.Options{DataDir: t.TempDir(), Host: h, Hosts: live,
			Logger: slog.New(slog.DiscardHandler), Parts: []part.Part{n}})
	}
	const mac = "52:54:00:00:00:01" // spec's NIC
	claim := func() store.Record {
		t.Helper()
		r, err := st.Record(ctx, "nic-mac/"+mac)
		if err != nil {
			t.Fatalf("claim of %s: %v", mac, err)
		}
		return r
	}
	if _, err := cs["host-a"].Apply(ctx, []byte(spec)); err != nil {
		t.Fatal(err)
	}
	other := "name: app-2\naddresses: [10.1.0.8]\nnics: [{mac: \"" + mac + "\"}]\n"
	if _, err := cs["host-b"].Apply(ctx, []byte(other)); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "instance app-1") || strings.Contains(err.Error(), "no record") {
		t.Fatalf("another host's instance with app-1's MAC: %v", err)
	}
	before := claim()
	live.Set("host-a", true)
	if _, err := cs["host-b"].Adopt(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cs["host-b"].Apply(ctx, []byte(spec)); err != nil {
		t.Fatalf("the adopting host's apply: %v", err)
	}
	if after := claim(); after.Version != before.Version || string(after.Value) != string(before.Value) {
		t.Fatalf("the adopting apply changed the claim: %s v%d, was %s v%d", after.Value, after.Version, before.Value, before.Version)
	}
	// The MAC changes on re-apply: the old one is free.
	changed := strings.Replace(spec, mac, "52:54:00:00:00:02", 1)
	if _, err := cs["host-b"].Apply(ctx, []byte(changed)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Record(ctx, "nic-mac/"+mac); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the old MAC's claim after the change: %v", err)
	}
	live.Set("host-a", false)
	live.Set("host-b", true)
	if _, err := cs["host-a"].ForceDeleteFromStore(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Record(ctx, "nic-mac/52:54:00:00:00:02"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the claim after the force-delete: %v", err)
	}
	if _, err := cs["host-a"].Apply(ctx, []byte(strings.Replace(other, mac, "52:54:00:00:00:02", 1))); err != nil {
		t.Fatalf("the MAC once its instance was force-deleted: %v", err)
	}
}
