package controller

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/vmeta/vmeta/internal/revert"
)

// TestInstanceStatesAsListAll: the states hostctl/view gives hostctl's
// metrics over the core's hypervisor and parts (view.States, as the
// daemon wires it) are those ListAll shows — libvirt's (running,
// shutoff, missing, unknown when the domains cannot be listed), a fault
// turning an own instance that is not running into error, a state record
// (rescue) winning for own and other hosts' instances alike, and nothing
// for another host's instance — from the records alone.
func TestInstanceStatesAsListAll(t *testing.T) {
	e := newEnv(t)
	e.c.hostName = "host-a"
	ctx := context.Background()
	b := newController(e.st, Options{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler), Host: "host-b"})
	apply := func(c *Controller, i int, name string) {
		t.Helper()
		if _, err := c.Apply(ctx, fmt.Appendf(nil, "name: %s\naddresses: [10.1.0.%d]\n", name, i)); err != nil {
			t.Fatal(err)
		}
	}
	for i, name := range []string{"run-1", "off-1", "gone-1", "err-1", "errrun-1", "resc-1"} {
		apply(e.c, i+1, name)
	}
	for i, name := range []string{"other-1", "other-err", "other-resc"} {
		apply(b, i+20, name)
	}
	uuid := func(name string) string {
		rec, err := e.st.Instance(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return rec.UUID
	}
	e.hv.mu.Lock()
	for _, name := range []string{"run-1", "errrun-1"} {
		e.hv.domains[name].running = true
	}
	for _, name := range []string{"off-1", "err-1"} {
		e.hv.domains[name].running = false
	}
	delete(e.hv.domains, "gone-1")
	e.hv.mu.Unlock()
	for _, name := range []string{"err-1", "errrun-1", "other-err"} {
		if err := e.c.setFault(ctx, uuid(name), name, "test fault"); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"resc-1", "other-resc"} {
		r := revert.New(e.c.log, "test")
		if err := e.c.putVMState(ctx, r, uuid(name), vmState{Instance: name, State: StateRescue}); err != nil {
			t.Fatal(err)
		}
		r.Success()
	}

	compare := func(want map[string]string, failList bool) {
		t.Helper()
		failNext := func() {
			e.hv.mu.Lock()
			if failList {
				e.hv.failAt = len(e.hv.calls) + 1
			}
			e.hv.mu.Unlock()
		}
		failNext()
		insts, err := e.c.ListAll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]string{}
		for _, in := range insts {
			listed[in.Spec.Name] = in.Host + "/" + in.State
		}
		recs, err := e.st.Instances(ctx)
		if err != nil {
			t.Fatal(err)
		}
		failNext()
		states, err := e.c.shown().InstanceStates(ctx, recs)
		if err != nil {
			t.Fatal(err)
		}
		if len(states) != len(recs) || len(recs) != len(want) {
			t.Fatalf("%d states of %d records, want %d", len(states), len(recs), len(want))
		}
		for i, rec := range recs {
			got := rec.Host + "/" + states[i]
			if got != listed[rec.Name] || got != want[rec.Name] {
				t.Errorf("%s: view's state %q, ListAll %q, want %q", rec.Name, got, listed[rec.Name], want[rec.Name])
			}
		}
	}
	compare(map[string]string{
		"run-1": "host-a/running", "off-1": "host-a/shutoff", "gone-1": "host-a/missing",
		"err-1": "host-a/error", "errrun-1": "host-a/running", "resc-1": "host-a/rescue",
		"other-1": "host-b/", "other-err": "host-b/", "other-resc": "host-b/rescue",
	}, false)
	// libvirt cannot list its domains: own instances are unknown (a
	// fault does not turn unknown into error).
	compare(map[string]string{
		"run-1": "host-a/unknown", "off-1": "host-a/unknown", "gone-1": "host-a/unknown",
		"err-1": "host-a/unknown", "errrun-1": "host-a/unknown", "resc-1": "host-a/rescue",
		"other-1": "host-b/", "other-err": "host-b/", "other-resc": "host-b/rescue",
	}, true)
}
