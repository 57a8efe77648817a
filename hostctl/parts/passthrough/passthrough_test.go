package passthrough

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// fakeInventory hands out the free addresses in order and records calls.
type fakeInventory struct {
	managed map[string]string // address -> alias
	free    []string
	held    []string
	calls   []string
	fail    error
}

func (f *fakeInventory) ClaimFor(_ context.Context, _, _ string, reqs []model.PCIAlias, _ []model.PCIDevice) ([]model.PCIDevice, []string, error) {
	f.calls = append(f.calls, "claim")
	if f.fail != nil {
		return nil, nil, f.fail
	}
	var out []model.PCIDevice
	var claimed []string
	for _, r := range reqs {
		if len(f.free) == 0 {
			return nil, nil, errors.New("no device free")
		}
		a := f.free[0]
		f.free, f.held = f.free[1:], append(f.held, a)
		claimed = append(claimed, a)
		out = append(out, model.PCIDevice{Address: a, Alias: r.Name})
	}
	return out, claimed, nil
}

func (f *fakeInventory) ReleaseFor(_ context.Context, _ string, addrs []string) error {
	f.calls = append(f.calls, "release")
	if addrs == nil {
		f.held = nil
		return nil
	}
	f.held = slices.DeleteFunc(f.held, func(a string) bool { return slices.Contains(addrs, a) })
	return nil
}

func (f *fakeInventory) HeldBy(context.Context, string) ([]string, error) {
	return slices.Clone(f.held), nil
}

func (f *fakeInventory) Managed(_ context.Context, addr string) (string, bool, error) {
	alias, ok := f.managed[addr]
	return alias, ok, nil
}

func TestShelveUnshelve(t *testing.T) {
	ctx := context.Background()
	inv := &fakeInventory{free: []string{"0000:3c:00.0"}, held: []string{"0000:3b:00.0"}}
	p := New(inv)
	in := &model.Instance{Name: "vm", UUID: "u", PCIAliases: []model.PCIAlias{{Name: "gpu", Tag: "ml"}},
		PCIDevices: []model.PCIDevice{{Address: "0000:3b:00.0", Alias: "gpu", Tag: "ml", GuestAddress: "0000:00:05.0"}, {Address: "0000:01:00.0"}}}
	pi := &part.Instance{Spec: in}

	// Shelve releases; a failed shelve claims again.
	r := revert.New(slog.New(slog.DiscardHandler), "shelve")
	if err := p.Prepare(ctx, part.Shelve, pi, r, &part.Contribution{}); err != nil {
		t.Fatal(err)
	}
	if len(inv.held) != 0 {
		t.Fatalf("held after shelve: %v", inv.held)
	}
	var err error = errors.New("a later step failed")
	r.Fail(&err)
	if len(inv.held) != 1 || inv.held[0] != "0000:3c:00.0" {
		t.Fatalf("held after the shelve's undo: %v", inv.held)
	}

	// Unshelve claims again: the new device replaces the alias entry,
	// with its tag; the direct entry stays.
	inv.held, inv.free = nil, []string{"0000:3d:00.0"}
	r = revert.New(slog.New(slog.DiscardHandler), "unshelve")
	if err := p.Prepare(ctx, part.Unshelve, pi, r, &part.Contribution{}); err != nil {
		t.Fatal(err)
	}
	r.Success()
	want := []model.PCIDevice{{Address: "0000:01:00.0"}, {Address: "0000:3d:00.0", Alias: "gpu", Tag: "ml"}}
	if !slices.Equal(in.PCIDevices, want) {
		t.Fatalf("pci_devices after unshelve: %+v, want %+v", in.PCIDevices, want)
	}

	// A refused claim changes nothing.
	inv.fail = errors.New("device 0000:3b:00.0 needs cleaning")
	before := slices.Clone(in.PCIDevices)
	if err := p.Prepare(ctx, part.Unshelve, pi, revert.New(slog.New(slog.DiscardHandler), "x"), &part.Contribution{}); err == nil {
		t.Fatal("a refused claim was accepted")
	}
	if !slices.Equal(in.PCIDevices, before) {
		t.Fatalf("a refused claim changed the spec: %+v", in.PCIDevices)
	}

	// Without an inventory, or devices, nothing is called.
	inv.calls = nil
	if err := New(nil).Prepare(ctx, part.Shelve, pi, nil, &part.Contribution{}); err != nil {
		t.Fatal(err)
	}
	if err := p.Prepare(ctx, part.Shelve, &part.Instance{Spec: &model.Instance{Name: "plain"}}, nil, &part.Contribution{}); err != nil || len(inv.calls) != 0 {
		t.Fatalf("an instance without devices: calls %v, err %v", inv.calls, err)
	}
}
