package passthrough

import (
	"context"
	"fmt"
	"slices"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
)

// Devices across start: apply claims an instance's pci_aliases (and burns
// one-time-use devices) before it defines the domain with their
// <hostdev>s, and the instance holds them while it exists: stopped,
// running, and after a start that fails (a share that cannot be mounted,
// libvirt refusing the domain, each hard reboot of an instance in ERROR)
// — the specification burns only on allocation, and Nova keeps an
// instance's allocations until it is deleted. A failed start therefore
// changes nothing about devices: the domain's definition keeps its
// <hostdev>s and the retry boots with the same device. Only delete (or a
// move: the old host releases what an adopted instance held) releases
// them, as burned.
//
// Before each start, PreStart still checks that the instance holds every
// device its domain names, and heals one that does not (a hostctl before
// this rule released the devices of a failed start and took their
// <hostdev>s out of the definition): its pci_aliases are claimed again —
// another device when the released one is burned — and the shut-off
// domain is redefined with the devices held (or an unchanged device's
// <hostdev> put back) before it boots. A domain is therefore never started
// with a device its instance does not hold.

// PreStart implements part.PreStarter: it makes sure the instance holds
// the devices of its stored spec before the start takes the instance's
// lock (the apply of a redefinition takes it too). The core refuses a
// shelved instance (which holds no devices) before it asks.
func (p *Part) PreStart(ctx context.Context, _ part.Op, pi *part.Instance) error {
	in := pi.Spec
	if p.inv == nil || p.core == nil || len(in.PCIAliases) == 0 {
		return nil
	}
	name := in.Name
	held, err := p.inv.HeldBy(ctx, in.UUID)
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	held = aliasHeld(in, held)
	if holdsAll(in, held) {
		return p.restoreHostdevs(ctx, in, held)
	}
	p.log.Warn("the instance no longer holds the devices of its domain (released by an earlier hostctl when a start failed); claiming again", "name", name)
	got, _, err := p.inv.ClaimFor(ctx, in.UUID, in.Name, in.PCIAliases, direct(in))
	if err != nil {
		return fmt.Errorf("start %s: claim devices again: %w", name, err)
	}
	// Devices claimed again unchanged go back into the definition as they
	// were; when any is another device, the stored spec is applied again:
	// the domain is redefined with the devices held and the metadata (their
	// guest addresses) republished.
	held = held[:0]
	for _, d := range got {
		if d.Alias != "" {
			held = append(held, d.Address)
		}
	}
	if err := p.restoreHostdevs(ctx, in, slices.DeleteFunc(slices.Clone(held), func(a string) bool {
		return !slices.ContainsFunc(in.PCIDevices, func(d model.PCIDevice) bool { return d.Alias != "" && d.Address == a })
	})); err != nil {
		return err
	}
	if holdsAll(in, held) {
		return nil
	}
	p.log.Info("redefining the domain with the devices claimed again", "name", name, "devices", held)
	if err := p.core.Reapply(ctx, in); err != nil {
		return fmt.Errorf("start %s: redefine with the devices claimed again: %w", name, err)
	}
	return nil
}

// restoreHostdevs puts back into the domain's definition the <hostdev> of
// every held device it lacks: an earlier hostctl's failed start took them
// out, and a device claimed again unchanged leaves the spec unchanged, so
// the apply did not redefine the domain. Each goes back at the guest
// address the stored spec has for it, where the published metadata says
// it is.
func (p *Part) restoreHostdevs(ctx context.Context, in *model.Instance, held []string) error {
	name := in.Name
	if len(held) == 0 {
		return nil
	}
	if p.defs == nil {
		return nil // no hypervisor
	}
	doc, err := p.defs.XML(ctx, name, false)
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	devs, err := virt.ParseDevices(doc)
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	for _, a := range held {
		if _, ok := devs.Hostdev(a); ok {
			continue
		}
		guest := ""
		for _, d := range in.PCIDevices {
			if d.Address == a {
				guest = d.GuestAddress
			}
		}
		x, err := virt.HostdevXML(a, guest)
		if err == nil {
			err = p.defs.AttachDevice(ctx, name, x, virt.AffectConfig)
		}
		if err != nil {
			return fmt.Errorf("start %s: put back the hostdev of %s: %w", name, a, err)
		}
	}
	return nil
}

// holdsAll reports whether the inventory devices of in's spec (the
// pci_devices entries apply added for its pci_aliases) are exactly the
// devices held, as many as the aliases ask for.
func holdsAll(in *model.Instance, held []string) bool {
	want := 0
	for _, a := range in.PCIAliases {
		want += max(a.Count, 1)
	}
	var mine []string
	for _, d := range in.PCIDevices {
		if d.Alias != "" {
			mine = append(mine, d.Address)
		}
	}
	if len(mine) != want || len(held) != want {
		return false
	}
	slices.Sort(mine)
	held = slices.Clone(held)
	slices.Sort(held)
	return slices.Equal(mine, held)
}

// aliasHeld keeps of held the addresses that are not direct pci_devices
// entries of in (a direct one-time-use entry is held too, but is no
// pci_aliases device).
func aliasHeld(in *model.Instance, held []string) []string {
	return slices.DeleteFunc(slices.Clone(held), func(a string) bool {
		return slices.ContainsFunc(in.PCIDevices, func(d model.PCIDevice) bool { return d.Alias == "" && d.Address == a })
	})
}
