package controller_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/hosts/hoststest"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/faults"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
)

// faultHosts is hostControllers (hosts_test.go) with the faults part
// (hostctl/parts/faults) registered on every host, as the daemon does.
func faultHosts(t *testing.T, names ...string) (map[string]*controller.Controller, store.Store, *hoststest.Liveness) {
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
			Logger: slog.New(slog.DiscardHandler), Parts: []part.Part{faults.New(st, nil)}})
	}
	return out, st, live
}

// TestFaultFollowsTheInstance: an instance's ERROR is a store record
// every host sees: another host lists it with its fault, the adopting
// host shows it in ERROR, and the delete removes the record. (The
// record is written as the faults part writes it after a failed share
// mount: hostctl/shares' TestLibvirtMountFailureError makes one for
// real.)
func TestFaultFollowsTheInstance(t *testing.T) {
	ctx := context.Background()
	cs, st, live := faultHosts(t, "host-a", "host-b")
	inst, err := cs["host-a"].Apply(ctx, []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	const reason = "share mount failed: share 1b4e28ba-2fa1-11d2-883f-0016d3cca427 on instance app-1 could not be mounted on the host"
	recs := st.(store.Records)
	if _, err := recs.PutRecord(ctx, "instance-fault/"+inst.Spec.UUID, []byte(`{"reason":"`+reason+`"}`), 0); err != nil {
		t.Fatal(err)
	}
	for host, c := range cs {
		all, err := c.ListAll(ctx)
		if err != nil || len(all) != 1 || all[0].Fault != reason {
			t.Errorf("%s: list all: %+v, %v", host, all, err)
		}
	}
	if got, err := cs["host-a"].Get(ctx, "app-1"); err != nil || got.State != controller.StateError || got.Fault != reason {
		t.Errorf("owner: state %q fault %q, %v", got.State, got.Fault, err)
	}
	live.Set("host-a", true)
	if _, err := cs["host-b"].Adopt(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	got, err := cs["host-b"].Get(ctx, "app-1")
	if err != nil || got.State != controller.StateError || got.Fault != reason {
		t.Errorf("adopting host: state %q fault %q, %v", got.State, got.Fault, err)
	}
	if err := cs["host-b"].Delete(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if rs, _ := recs.Records(ctx, "instance-fault/"); len(rs) != 0 {
		t.Errorf("fault record left after delete: %v", rs)
	}
}
