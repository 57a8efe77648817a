package passthrough

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
)

func quiet(p *Part) *Part { p.Bind(nil, nil, slog.New(slog.DiscardHandler)); return p }

// Without an inventory, pci_aliases and one_time_use are refused naming
// the field; plain pci_devices pass, each keeping the guest address the
// stored spec had for it.
func TestClaimWithoutInventory(t *testing.T) {
	ctx := context.Background()
	p := quiet(New(nil))
	for _, tc := range []struct {
		name, field string
		in          model.Instance
	}{
		{"alias", "pci_aliases", model.Instance{Name: "vm", PCIAliases: []model.PCIAlias{{Name: "gpu"}}}},
		{"one time use", "pci_devices[0].one_time_use: true", model.Instance{Name: "vm", PCIDevices: []model.PCIDevice{{Address: "0000:01:00.0", OneTimeUse: true}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.Claim(ctx, part.Apply, &part.Instance{Spec: &tc.in})
			if !errors.Is(err, model.ErrInvalidSpec) || !strings.Contains(err.Error(), "apply vm: ") || !strings.Contains(err.Error(), tc.field) ||
				!strings.Contains(err.Error(), "no device inventory (hostctl serve --device-spec)") {
				t.Errorf("err = %v", err)
			}
		})
	}
	in := &model.Instance{Name: "vm", PCIDevices: []model.PCIDevice{{Address: "0000:01:00.0"}}}
	old := &model.Instance{Name: "vm", PCIDevices: []model.PCIDevice{{Address: "0000:01:00.0", GuestAddress: "0000:00:07.0"}}}
	end, err := p.Claim(ctx, part.Apply, &part.Instance{Spec: in, Old: old})
	if err != nil {
		t.Fatal(err)
	}
	end(ctx, nil)
	if in.PCIDevices[0].GuestAddress != "0000:00:07.0" {
		t.Errorf("guest address %q, want the stored spec's", in.PCIDevices[0].GuestAddress)
	}
}

// An apply claims the aliases (their devices join pci_devices with the
// request's tag, at the guest address they had); a pci_devices address of
// an inventory device is refused; a failed apply gives back what its claim
// took; a successful one releases what the instance no longer asks for.
func TestClaim(t *testing.T) {
	ctx := context.Background()
	inv := &fakeInventory{managed: map[string]string{"0000:3b:00.0": "gpu"}, free: []string{"0000:3b:00.0", "0000:3c:00.0"}}
	p := quiet(New(inv))

	bad := &model.Instance{Name: "vm", PCIDevices: []model.PCIDevice{{Address: "0000:3b:00.0"}}}
	if _, err := p.Claim(ctx, part.Apply, &part.Instance{Spec: bad}); !errors.Is(err, model.ErrInvalidSpec) ||
		!strings.Contains(err.Error(), `pci_devices[0].address: "0000:3b:00.0": is a device of this host's inventory (alias gpu)`) {
		t.Fatalf("an inventory device as a direct entry: %v", err)
	}
	if len(inv.calls) != 0 {
		t.Fatalf("the refused spec called the inventory: %v", inv.calls)
	}

	in := &model.Instance{Name: "vm", UUID: "u", PCIAliases: []model.PCIAlias{{Name: "gpu", Tag: "ml"}}}
	end, err := p.Claim(ctx, part.Apply, &part.Instance{Spec: in})
	if err != nil {
		t.Fatal(err)
	}
	if want := []model.PCIDevice{{Address: "0000:3b:00.0", Alias: "gpu", Tag: "ml"}}; !slices.Equal(in.PCIDevices, want) {
		t.Fatalf("pci_devices %+v, want %+v", in.PCIDevices, want)
	}
	end(ctx, errors.New("the define failed"))
	if len(inv.held) != 0 {
		t.Fatalf("held after the failed apply: %v", inv.held)
	}

	// Held from before: 0000:3b:00.0 (at a guest address); the apply
	// claims 0000:3c:00.0 and, once it succeeded, lets the other go.
	inv.held, inv.free = []string{"0000:3b:00.0"}, []string{"0000:3c:00.0"}
	old := &model.Instance{Name: "vm", UUID: "u", PCIDevices: []model.PCIDevice{{Address: "0000:3c:00.0", Alias: "gpu", GuestAddress: "0000:00:05.0"}}}
	in = &model.Instance{Name: "vm", UUID: "u", PCIAliases: []model.PCIAlias{{Name: "gpu"}}, PCIDevices: []model.PCIDevice{{Address: "0000:3b:00.0", Alias: "gpu"}}}
	end, err = p.Claim(ctx, part.Apply, &part.Instance{Spec: in, Old: old})
	if err != nil {
		t.Fatal(err)
	}
	if want := []model.PCIDevice{{Address: "0000:3c:00.0", Alias: "gpu", GuestAddress: "0000:00:05.0"}}; !slices.Equal(in.PCIDevices, want) {
		t.Fatalf("pci_devices %+v, want %+v", in.PCIDevices, want)
	}
	end(ctx, nil)
	if !slices.Equal(inv.held, []string{"0000:3c:00.0"}) {
		t.Fatalf("held after the apply: %v, want only what the spec asks for", inv.held)
	}
}

// A new instance's claim that fails releases at once whatever the store
// may have taken for it (a lost reply); an existing instance's does not
// (it holds its devices).
func TestClaimFailure(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		old   *model.Instance
		calls []string
	}{
		{"new instance", nil, []string{"claim", "release"}},
		{"existing instance", &model.Instance{Name: "vm"}, []string{"claim"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := &fakeInventory{fail: errors.New("claim devices for vm: lost reply")}
			in := &model.Instance{Name: "vm", UUID: "u", PCIAliases: []model.PCIAlias{{Name: "gpu"}}}
			if _, err := quiet(New(inv)).Claim(ctx, part.Apply, &part.Instance{Spec: in, Old: tc.old}); err == nil ||
				err.Error() != "apply vm: claim devices for vm: lost reply" {
				t.Fatalf("err = %v", err)
			}
			if !slices.Equal(inv.calls, tc.calls) {
				t.Errorf("calls %v, want %v", inv.calls, tc.calls)
			}
		})
	}
}

// fakeCore is the controller core and the hypervisor as PreStart uses
// them: one domain's persistent definition.
type fakeCore struct {
	xml       string
	attached  []string
	reapplied []*model.Instance
}

func (f *fakeCore) XML(context.Context, string, bool) ([]byte, error) {
	return []byte(f.xml), nil
}

func (f *fakeCore) AttachDevice(_ context.Context, _ string, x []byte, _ virt.Affect) error {
	f.attached = append(f.attached, string(x))
	return nil
}

func (f *fakeCore) Reapply(_ context.Context, in *model.Instance) error {
	f.reapplied = append(f.reapplied, in)
	return nil
}

// Before a start: an instance that holds its devices but whose
// definition lost a <hostdev> gets it back at its guest address; one that
// no longer holds them claims again, and another device is applied anew;
// without an inventory, or unbound, nothing is asked.
func TestPreStart(t *testing.T) {
	ctx := context.Background()
	spec := func() *model.Instance {
		return &model.Instance{Name: "vm", UUID: "u", PCIAliases: []model.PCIAlias{{Name: "gpu"}},
			PCIDevices: []model.PCIDevice{{Address: "0000:3b:00.0", Alias: "gpu", GuestAddress: "0000:00:05.0"}}}
	}
	const dom = `<domain type="kvm"><name>vm</name><uuid>u</uuid><devices></devices></domain>`

	inv := &fakeInventory{held: []string{"0000:3b:00.0"}}
	core := &fakeCore{xml: dom}
	p := New(inv)
	p.Bind(core, core, slog.New(slog.DiscardHandler))
	if err := p.PreStart(ctx, part.Start, &part.Instance{Spec: spec()}); err != nil {
		t.Fatal(err)
	}
	want, err := virt.HostdevXML("0000:3b:00.0", "0000:00:05.0")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(core.attached, []string{string(want)}) || len(core.reapplied) != 0 {
		t.Fatalf("attached %q, reapplied %d; want the hostdev back", core.attached, len(core.reapplied))
	}

	inv.held, inv.free, core.attached = nil, []string{"0000:3c:00.0"}, nil
	if err := p.PreStart(ctx, part.Start, &part.Instance{Spec: spec()}); err != nil {
		t.Fatal(err)
	}
	if len(core.attached) != 0 || len(core.reapplied) != 1 {
		t.Fatalf("attached %q, reapplied %d; want the spec applied again", core.attached, len(core.reapplied))
	}

	inv.calls = nil
	if err := New(inv).PreStart(ctx, part.Start, &part.Instance{Spec: spec()}); err != nil || len(inv.calls) != 0 {
		t.Errorf("unbound part: %v, calls %v", err, inv.calls)
	}
	if err := quiet(New(nil)).PreStart(ctx, part.Start, &part.Instance{Spec: spec()}); err != nil {
		t.Errorf("without an inventory: %v", err)
	}
}
