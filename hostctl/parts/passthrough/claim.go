package passthrough

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
)

// Claims at apply: an instance's pci_aliases are claimed (and
// one-time-use devices burned, in the same atomic write) before its
// domain is defined, as are its direct pci_devices entries marked
// one_time_use. The instance holds them while it exists — stopped,
// running, in ERROR, after a failed start — and they are released only
// when it is deleted (or no longer asks for them, or the apply that
// claimed them for a new instance fails).

// Claim implements part.Claimer: it resolves in's pci_aliases into
// pci_devices: entries a previous apply added (Alias set) are dropped and
// claimed again (the inventory knows what the instance holds), and a
// pci_devices address of an inventory device is refused (it would skip
// the burn). A direct pci_devices entry marked one_time_use is burned like
// an alias claim; without an inventory that field is refused (nothing
// could keep the device from the next instance). Each device keeps the
// guest address the stored spec (in.Old) had for it. The end of a failed
// apply gives back what this call claimed; that of a successful one
// releases the devices the instance holds but no longer asks for.
//
// When a new instance's claim fails (in.Old is nil), whatever the store
// did take for it (a write whose reply was lost) is released at once, as
// burned — nothing else can hold its UUID.
func (p *Part) Claim(ctx context.Context, op part.Op, pi *part.Instance) (end func(context.Context, error), err error) {
	in := pi.Spec
	nop := func(context.Context, error) {}
	kept := in.PCIDevices[:0:0]
	for _, d := range in.PCIDevices {
		if d.Alias == "" {
			kept = append(kept, d)
		}
	}
	in.PCIDevices = kept
	if p.inv == nil {
		var fe []model.FieldError
		if len(in.PCIAliases) > 0 {
			fe = append(fe, model.FieldError{Field: "pci_aliases", Rule: "this host has no device inventory (hostctl serve --device-spec)"})
		}
		for i, d := range in.PCIDevices {
			if d.OneTimeUse {
				fe = append(fe, model.FieldError{Field: fmt.Sprintf("pci_devices[%d].one_time_use", i), Value: true,
					Rule: "this host has no device inventory (hostctl serve --device-spec) to burn the device in: nothing would keep it from the next instance"})
			}
		}
		if len(fe) > 0 {
			return nil, fmt.Errorf("%s %s: %w", op, in.Name, &model.SpecError{Errors: fe})
		}
		keepGuestAddresses(pi.Old, in)
		return nop, nil
	}
	var fe []model.FieldError
	for i, d := range in.PCIDevices {
		alias, ok, err := p.inv.Managed(ctx, d.Address)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", op, in.Name, err)
		}
		if ok {
			fe = append(fe, model.FieldError{Field: fmt.Sprintf("pci_devices[%d].address", i), Value: d.Address,
				Rule: fmt.Sprintf("is a device of this host's inventory (alias %s): request it through pci_aliases", alias)})
		}
	}
	if len(fe) > 0 {
		return nil, fmt.Errorf("%s %s: %w", op, in.Name, &model.SpecError{Errors: fe})
	}
	held, claimed, err := p.inv.ClaimFor(ctx, in.UUID, in.Name, in.PCIAliases, in.PCIDevices)
	if err != nil {
		if pi.Old == nil && (len(in.PCIAliases) > 0 || slices.ContainsFunc(in.PCIDevices, func(d model.PCIDevice) bool { return d.OneTimeUse })) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
			if rerr := p.inv.ReleaseFor(rctx, in.UUID, nil); rerr != nil {
				p.log.Error("release what a failed claim may have taken (the next start releases it)", "instance", in.Name, "err", rerr)
			}
			cancel()
		}
		return nil, fmt.Errorf("%s %s: %w", op, in.Name, err)
	}
	// A tagged request's device carries the tag into the guest's device
	// metadata (validation allows a tag only with count 1).
	tags := map[string]string{}
	for _, a := range in.PCIAliases {
		tags[a.Name] = a.Tag
	}
	for _, d := range held {
		if d.Alias == "" {
			continue // a direct entry: already in the spec
		}
		d.Tag = tags[d.Alias]
		in.PCIDevices = append(in.PCIDevices, d)
	}
	keepGuestAddresses(pi.Old, in)
	return func(ctx context.Context, opErr error) {
		if opErr != nil {
			p.giveBack(ctx, in, claimed)
			return
		}
		p.trim(ctx, in, held)
	}, nil
}

// giveBack releases what the claim of a failed apply took (burned devices
// stay burned, and now need cleaning).
func (p *Part) giveBack(ctx context.Context, in *model.Instance, claimed []string) {
	if len(claimed) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	if err := p.inv.ReleaseFor(rctx, in.UUID, claimed); err != nil {
		p.log.Error("release the devices of a failed apply", "instance", in.Name, "devices", strings.Join(claimed, ","), "err", err)
	}
}

// trim releases, after a successful apply, the devices the instance
// holds but no longer asks for.
func (p *Part) trim(ctx context.Context, in *model.Instance, held []model.PCIDevice) {
	all, err := p.inv.HeldBy(ctx, in.UUID)
	if err != nil {
		p.log.Error("list the devices an instance holds", "instance", in.Name, "err", err)
		return
	}
	var extra []string
	for _, a := range all {
		if !slices.ContainsFunc(held, func(d model.PCIDevice) bool { return d.Address == a }) {
			extra = append(extra, a)
		}
	}
	if len(extra) == 0 {
		return
	}
	if err := p.inv.ReleaseFor(ctx, in.UUID, extra); err != nil {
		p.log.Error("release devices an instance no longer asks for", "instance", in.Name, "devices", strings.Join(extra, ","), "err", err)
	}
}

// keepGuestAddresses gives each passthrough device of in that has no
// guest address the one the stored spec old had for the same host
// device, so a redefined domain keeps the device where the guest saw it.
func keepGuestAddresses(old, in *model.Instance) {
	if old == nil {
		return
	}
	prev := map[string]string{}
	for _, d := range old.PCIDevices {
		if d.GuestAddress != "" && d.GuestAddress != "none" {
			prev[d.Address] = d.GuestAddress
		}
	}
	for i := range in.PCIDevices {
		if d := &in.PCIDevices[i]; d.GuestAddress == "" {
			d.GuestAddress = prev[d.Address]
		}
	}
}
