package view_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/view"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/store"
)

type domains struct {
	doms  []virt.Domain
	err   error
	calls int
}

func (d *domains) List(context.Context) ([]virt.Domain, error) {
	d.calls++
	return d.doms, d.err
}

type records map[string]string

func (r records) Faults(context.Context) (map[string]string, error) { return r, nil }
func (r records) States(context.Context) (map[string]string, error) { return r, nil }

type failing struct{ err error }

func (f failing) Faults(context.Context) (map[string]string, error) { return nil, f.err }
func (f failing) States(context.Context) (map[string]string, error) { return nil, f.err }

// uuid is a record's UUID as libvirt and the store spell it (upper case
// in the record: the faults and states are keyed by lower case).
func uuid(n string) string { return "0000000" + n + "-0000-4000-8000-00000000000" + n }

// TestStatesOf: the state and fault instance list shows for each record:
// the domain's for this host's instances (running, shutoff, missing when
// libvirt has no domain of that name and UUID), error for a fault unless
// the domain runs, nothing for another host's instance (its fault is
// shown all the same), and a kept state winning for any host's.
func TestStatesOf(t *testing.T) {
	ctx := context.Background()
	recs := []store.Instance{
		{Name: "run", UUID: uuid("1"), Host: "host-a"},
		{Name: "off", UUID: uuid("2"), Host: "host-a"},
		{Name: "gone", UUID: uuid("3"), Host: "host-a"},
		{Name: "err", UUID: uuid("4"), Host: "host-a"},
		{Name: "errrun", UUID: uuid("5"), Host: "host-a"},
		{Name: "resc", UUID: uuid("6"), Host: "host-a"},
		{Name: "other", UUID: uuid("7"), Host: "host-b"},
		{Name: "other-err", UUID: uuid("8"), Host: "host-b"},
		{Name: "other-resc", UUID: uuid("9"), Host: "host-b"},
		{Name: "renamed", UUID: uuid("a"), Host: ""}, // before hosts were tracked: this host's
	}
	doms := &domains{doms: []virt.Domain{
		{Name: "run", UUID: uuid("1"), ID: 1}, {Name: "off", UUID: uuid("2"), ID: -1},
		{Name: "err", UUID: uuid("4"), ID: -1}, {Name: "errrun", UUID: uuid("5"), ID: 3},
		{Name: "resc", UUID: uuid("6"), ID: 4}, {Name: "renamed", UUID: uuid("b"), ID: 5},
	}}
	s := view.States{
		Host:    "host-a",
		Domains: doms,
		Faults:  records{strings.ToLower(uuid("4")): "f4", strings.ToLower(uuid("5")): "f5", strings.ToLower(uuid("8")): "f8"},
		Kept:    records{strings.ToLower(uuid("6")): "rescue", strings.ToLower(uuid("9")): "rescue"},
	}
	want := []view.Shown{
		{State: "running"}, {State: "shutoff"}, {State: view.Missing},
		{State: view.Error, Fault: "f4"}, {State: "running", Fault: "f5"}, {State: "rescue"},
		{}, {Fault: "f8"}, {State: "rescue"}, {State: view.Missing},
	}
	got, err := s.Of(ctx, recs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: %+v, want %+v", recs[i].Name, got[i], want[i])
		}
	}
	if doms.calls != 1 {
		t.Errorf("%d domain listings, want 1", doms.calls)
	}
	states, err := s.InstanceStates(ctx, recs)
	if err != nil || len(states) != len(recs) {
		t.Fatalf("InstanceStates: %v %v", states, err)
	}
	for i := range states {
		if states[i] != want[i].State {
			t.Errorf("InstanceStates %s: %q, want %q", recs[i].Name, states[i], want[i].State)
		}
	}

	// No records: libvirt is not asked.
	doms.calls = 0
	if got, err := s.Of(ctx, nil); err != nil || len(got) != 0 || doms.calls != 0 {
		t.Errorf("no records: %v %v, %d listings", got, err, doms.calls)
	}
}

// TestStatesOne: one instance with the domain state its caller read
// (libvirt not listed): a paused domain with a fault stays paused, a
// shut-off one is in error, a kept state wins, another host's instance
// has no state but its fault.
func TestStatesOne(t *testing.T) {
	ctx := context.Background()
	doms := &domains{}
	s := view.States{
		Host:    "host-a",
		Domains: doms,
		Faults:  records{strings.ToLower(uuid("1")): "f1", strings.ToLower(uuid("3")): "f3"},
		Kept:    records{strings.ToLower(uuid("2")): "shelved_offloaded"},
	}
	for _, tc := range []struct {
		rec   store.Instance
		state string
		want  view.Shown
	}{
		{store.Instance{Name: "a", UUID: uuid("1"), Host: "host-a"}, "paused", view.Shown{State: "paused", Fault: "f1"}},
		{store.Instance{Name: "a", UUID: uuid("1"), Host: "host-a"}, "shutoff", view.Shown{State: view.Error, Fault: "f1"}},
		{store.Instance{Name: "b", UUID: uuid("2"), Host: "host-a"}, view.Missing, view.Shown{State: "shelved_offloaded"}},
		{store.Instance{Name: "c", UUID: uuid("3"), Host: "host-b"}, "", view.Shown{Fault: "f3"}},
	} {
		got, err := s.One(ctx, tc.rec, tc.state)
		if err != nil || got != tc.want {
			t.Errorf("%s (%s): %+v, %v; want %+v", tc.rec.Name, tc.state, got, err, tc.want)
		}
	}
	if doms.calls != 0 {
		t.Errorf("%d domain listings, want none", doms.calls)
	}
	if _, err := (view.States{Faults: failing{errors.New("store down")}}).One(ctx, store.Instance{Name: "a"}, ""); err == nil || !strings.Contains(err.Error(), "store down") {
		t.Errorf("a fault read that fails: %v", err)
	}
}

// TestStatesWhenLibvirtCannotBeAsked: own instances are unknown (a fault
// does not turn unknown into error) and the failure is logged; a kept
// state still wins. Without a hypervisor there is no domain state, and a
// fault shows as error.
func TestStatesWhenLibvirtCannotBeAsked(t *testing.T) {
	ctx := context.Background()
	var logged bytes.Buffer
	recs := []store.Instance{{Name: "a", UUID: uuid("1"), Host: "h"}, {Name: "b", UUID: uuid("2"), Host: "h"}, {Name: "c", UUID: uuid("3"), Host: "h"}}
	faults := records{strings.ToLower(uuid("2")): "f"}
	kept := records{strings.ToLower(uuid("3")): "shelved_offloaded"}
	s := view.States{Host: "h", Domains: &domains{err: errors.New("libvirtd gone")}, Faults: faults, Kept: kept,
		Log: slog.New(slog.NewTextHandler(&logged, nil))}
	got, err := s.InstanceStates(ctx, recs)
	if err != nil || strings.Join(got, ",") != "unknown,unknown,shelved_offloaded" {
		t.Errorf("libvirt unreachable: %q %v", got, err)
	}
	if !strings.Contains(logged.String(), "cannot list libvirt domains") || !strings.Contains(logged.String(), "libvirtd gone") {
		t.Errorf("log: %s", logged.String())
	}
	s.Domains = nil
	if got, err := s.InstanceStates(ctx, recs); err != nil || strings.Join(got, ",") != ",error,shelved_offloaded" {
		t.Errorf("no hypervisor: %q %v", got, err)
	}
}

// TestStatesReadErrors: a fault or state record that cannot be read fails
// the whole answer, naming what was read.
func TestStatesReadErrors(t *testing.T) {
	boom := errors.New("store down")
	recs := []store.Instance{{Name: "a", UUID: uuid("1")}}
	for name, s := range map[string]view.States{
		"instance faults": {Faults: failing{boom}},
		"instance states": {Kept: failing{boom}},
	} {
		if _, err := s.Of(context.Background(), recs); !errors.Is(err, boom) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
