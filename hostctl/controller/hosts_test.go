package controller_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/hostctl/hosts"
	"github.com/vmeta/vmeta/hostctl/hosts/hoststest"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	drivepart "github.com/vmeta/vmeta/hostctl/parts/configdrive"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
)

// hostControllers returns one controller per host name on one store, each
// with its own data directory, as hostctl serve --host on several machines.
func hostControllers(t *testing.T, names ...string) (map[string]*controller.Controller, store.Store, *hoststest.Liveness) {
	t.Helper()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "vmeta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	live := &hoststest.Liveness{}
	out := map[string]*controller.Controller{}
	for _, n := range names {
		out[n] = controller.New(st, controller.Options{DataDir: t.TempDir(), Host: n, Hosts: live,
			Logger: slog.New(slog.DiscardHandler)})
	}
	return out, st, live
}

func TestHostsActOnlyOnTheirOwn(t *testing.T) {
	ctx := context.Background()
	cs, st, _ := hostControllers(t, "host-a", "host-b")
	a, b := cs["host-a"], cs["host-b"]
	inst, err := a.Apply(ctx, []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	if inst.Host != "host-a" {
		t.Fatalf("host = %q", inst.Host)
	}
	before, err := st.Instance(ctx, "app-1")
	if err != nil || before.Host != "host-a" {
		t.Fatalf("record: %+v %v", before, err)
	}

	refused := 0
	for _, tc := range []struct {
		name string
		op   func() error
	}{
		{"apply", func() error { _, err := b.Apply(ctx, []byte(spec)); return err }},
		{"delete", func() error { return b.Delete(ctx, "app-1") }},
		// The controllers here run without a hypervisor: ownership is
		// checked first, so these are refused naming the host, not with
		// ErrNoHypervisor.
		{"start", func() error { _, err := b.Start(ctx, "app-1"); return err }},
		{"stop", func() error { _, err := b.Stop(ctx, "app-1", 0); return err }},
		{"attach disk", func() error { _, err := b.AttachDisk(ctx, "app-1", types.DiskRequest{Tag: "x"}); return err }},
		{"detach nic", func() error { _, err := b.DetachNIC(ctx, "app-1", types.DetachRequest{Tag: "x"}); return err }},
		{"config drive", func() error {
			_, err := drivepart.NewBuilder(b, b.Documents(), b.DataDir()).WriteConfigDrive(ctx, "app-1", configdrive.ISO9660, &strings.Builder{})
			return err
		}},
		{"adopt while alive", func() error { _, err := b.Adopt(ctx, "app-1"); return err }},
		{"force delete while alive", func() error { _, err := b.ForceDeleteFromStore(ctx, "app-1"); return err }},
	} {
		err := tc.op()
		want := controller.ErrOtherHost
		if strings.Contains(tc.name, "alive") {
			want = controller.ErrOwnerAlive
		}
		if !errors.Is(err, want) || !strings.Contains(err.Error(), "app-1 lives on host-a") {
			t.Errorf("%s from host-b: err = %v, want %v naming host-a", tc.name, err, want)
			continue
		}
		refused++
	}
	if after, err := st.Instance(ctx, "app-1"); err != nil || after.Revision != before.Revision || after.Host != "host-a" {
		t.Fatalf("a refused command changed the record: %+v %v", after, err)
	}
	t.Logf("cross-host commands refused: %d", refused)

	// Lists: each host its own; all hosts on request.
	if l, _ := b.List(ctx); len(l) != 0 {
		t.Errorf("host-b lists %d instances, want 0", len(l))
	}
	if l, _ := b.ListAll(ctx); len(l) != 1 || l[0].Host != "host-a" {
		t.Errorf("host-b ListAll = %+v", l)
	}
	if l, _ := a.List(ctx); len(l) != 1 {
		t.Errorf("host-a lists %d instances, want 1", len(l))
	}
	// Counts (the heartbeat's, hostctl/hosts): each host its own, from
	// the records alone.
	if n, err := hosts.Count(ctx, st, "host-a"); n != 1 || err != nil {
		t.Errorf("host-a Count = %d, %v; want 1", n, err)
	}
	if n, err := hosts.Count(ctx, st, "host-b"); n != 0 || err != nil {
		t.Errorf("host-b Count = %d, %v; want 0", n, err)
	}
	// Showing another host's instance is allowed.
	if got, err := b.Get(ctx, "app-1"); err != nil || got.Host != "host-a" {
		t.Errorf("host-b Get: %+v %v", got, err)
	}
}

func TestAdoptOnlyWhenOwnerDownAndOneWinner(t *testing.T) {
	ctx := context.Background()
	cs, st, live := hostControllers(t, "host-a", "host-b", "host-c")
	if _, err := cs["host-a"].Apply(ctx, []byte(spec)); err != nil {
		t.Fatal(err)
	}
	if _, err := cs["host-b"].Adopt(ctx, "app-1"); !errors.Is(err, controller.ErrOwnerAlive) {
		t.Fatalf("adopt while alive: %v", err)
	}
	live.Set("host-a", true)
	var wg sync.WaitGroup
	errs := map[string]error{}
	var mu sync.Mutex
	for _, h := range []string{"host-b", "host-c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := cs[h].Adopt(ctx, "app-1")
			mu.Lock()
			errs[h] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	rec, err := st.Instance(ctx, "app-1")
	if err != nil {
		t.Fatal(err)
	}
	winner := rec.Host
	if winner != "host-b" && winner != "host-c" {
		t.Fatalf("owner after adopt = %q", winner)
	}
	for h, err := range errs {
		if h == winner && err != nil {
			t.Errorf("winner %s: %v", h, err)
		}
		if h != winner && err == nil {
			t.Errorf("both %s and %s adopted app-1", h, winner)
		}
		// The loser lost the compare-and-swap (the error names the
		// winner) or read the record after it (the winner is alive).
		if h != winner && err != nil && !strings.Contains(err.Error(), "app-1 lives on "+winner) {
			t.Errorf("loser %s: %v, want it to name the winner %s", h, err, winner)
		}
	}
	// The old owner, back, may no longer touch it.
	live.Set("host-a", false)
	if err := cs["host-a"].Delete(ctx, "app-1"); !errors.Is(err, controller.ErrOtherHost) {
		t.Fatalf("old owner delete: %v", err)
	}
	// The new owner manages it.
	if _, err := cs[winner].Apply(ctx, []byte(spec)); err != nil {
		t.Fatalf("new owner re-apply: %v", err)
	}
}

func TestForceDeleteFromStore(t *testing.T) {
	ctx := context.Background()
	cs, st, live := hostControllers(t, "host-a", "host-b")
	if _, err := cs["host-a"].Apply(ctx, []byte(spec)); err != nil {
		t.Fatal(err)
	}
	if _, err := cs["host-a"].ForceDeleteFromStore(ctx, "app-1"); !errors.Is(err, controller.ErrState) {
		t.Fatalf("force delete of an own instance: %v", err)
	}
	live.Set("host-a", true)
	left, err := cs["host-b"].ForceDeleteFromStore(ctx, "app-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(left) == 0 || !strings.Contains(strings.Join(left, "\n"), "host-a") {
		t.Errorf("left = %q", left)
	}
	if _, err := st.Instance(ctx, "app-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("record still there: %v", err)
	}
	if _, err := st.LookupAddress(ctx, "10.1.0.7"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("address still claimed: %v", err)
	}
}

// TestCountReadsRecordsOnly: the heartbeat's count (hosts.Count) does not
// decode specs: a record whose spec no longer decodes fails List, and
// with it, before Count, the heartbeat (the host then looked down to the
// others); Count counts it.
func TestCountReadsRecordsOnly(t *testing.T) {
	ctx := context.Background()
	cs, st, _ := hostControllers(t, "host-a")
	a := cs["host-a"]
	if _, err := a.Apply(ctx, []byte(spec)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Put(ctx, store.Instance{Name: "broken", UUID: "00000000-0000-4000-8000-00000000b0b0", Host: "host-a", Spec: []byte(`{"name": 7}`)},
		store.Document{}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.List(ctx); err == nil {
		t.Fatal("List of a record whose spec does not decode: no error")
	}
	if n, err := hosts.Count(ctx, st, "host-a"); n != 2 || err != nil {
		t.Errorf("Count = %d, %v; want 2", n, err)
	}
}
