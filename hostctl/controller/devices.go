package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vmeta/vmeta/internal/model"
)

// Devices is the host's passthrough device inventory (hostctl/devices) as
// the controller uses it: an instance's pci_aliases are claimed (and
// one-time-use devices burned, in the same atomic write) before its
// domain is defined, as are its direct pci_devices entries marked
// one_time_use. The instance holds them while it exists — stopped,
// running, in ERROR, after a failed start — and they are released only
// when it is deleted (or no longer asks for them, or the apply that
// claimed them for a new instance fails).
type Devices interface {
	// ClaimFor gives the instance the devices its aliases request and
	// burns its direct one-time-use entries (idempotent: what it holds
	// counts). It returns what the instance holds as pci_devices entries
	// (Alias set for the alias ones, empty for the direct ones), and the
	// addresses claimed by this call.
	ClaimFor(ctx context.Context, uuid, name string, reqs []model.PCIAlias, direct []model.PCIDevice) (held []model.PCIDevice, claimed []string, err error)
	// ReleaseFor releases what the instance holds (only addrs when not
	// nil). Released one-time-use devices stay burned.
	ReleaseFor(ctx context.Context, uuid string, addrs []string) error
	// HeldBy lists the addresses the instance holds.
	HeldBy(ctx context.Context, uuid string) ([]string, error)
	// Managed reports whether addr is a device of the device spec, and
	// its alias.
	Managed(ctx context.Context, addr string) (alias string, ok bool, err error)
}

// claimDevices resolves in's pci_aliases into pci_devices: entries a
// previous apply added (Alias set) are dropped and claimed again (the
// inventory knows what the instance holds), and a pci_devices address of
// an inventory device is refused (it would skip the burn). A direct
// pci_devices entry marked one_time_use is burned like an alias claim;
// without an inventory that field is refused (nothing could keep the
// device from the next instance). It returns what undoes the claims of
// this call, and what releases, after a successful apply, the devices the
// instance holds but no longer asks for.
//
// fresh says the instance has no stored record yet: when its claim fails,
// whatever the store did take for it (a write whose reply was lost) is
// released at once, as burned — nothing else can hold its UUID.
func (c *Controller) claimDevices(ctx context.Context, in *model.Instance, fresh bool) (undo, trim func(), err error) {
	nop := func() {}
	kept := in.PCIDevices[:0:0]
	for _, p := range in.PCIDevices {
		if p.Alias == "" {
			kept = append(kept, p)
		}
	}
	in.PCIDevices = kept
	if c.devices == nil {
		var fe []model.FieldError
		if len(in.PCIAliases) > 0 {
			fe = append(fe, model.FieldError{Field: "pci_aliases", Rule: "this host has no device inventory (hostctl serve --device-spec)"})
		}
		for i, p := range in.PCIDevices {
			if p.OneTimeUse {
				fe = append(fe, model.FieldError{Field: fmt.Sprintf("pci_devices[%d].one_time_use", i), Value: true,
					Rule: "this host has no device inventory (hostctl serve --device-spec) to burn the device in: nothing would keep it from the next instance"})
			}
		}
		if len(fe) > 0 {
			return nil, nil, fmt.Errorf("apply %s: %w", in.Name, &model.SpecError{Errors: fe})
		}
		return nop, nop, nil
	}
	var fe []model.FieldError
	for i, p := range in.PCIDevices {
		alias, ok, err := c.devices.Managed(ctx, p.Address)
		if err != nil {
			return nil, nil, fmt.Errorf("apply %s: %w", in.Name, err)
		}
		if ok {
			fe = append(fe, model.FieldError{Field: fmt.Sprintf("pci_devices[%d].address", i), Value: p.Address,
				Rule: fmt.Sprintf("is a device of this host's inventory (alias %s): request it through pci_aliases", alias)})
		}
	}
	if len(fe) > 0 {
		return nil, nil, fmt.Errorf("apply %s: %w", in.Name, &model.SpecError{Errors: fe})
	}
	held, claimed, err := c.devices.ClaimFor(ctx, in.UUID, in.Name, in.PCIAliases, in.PCIDevices)
	if err != nil {
		if fresh && (len(in.PCIAliases) > 0 || slices.ContainsFunc(in.PCIDevices, func(p model.PCIDevice) bool { return p.OneTimeUse })) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
			if rerr := c.devices.ReleaseFor(rctx, in.UUID, nil); rerr != nil {
				c.log.Error("release what a failed claim may have taken (the next start releases it)", "instance", in.Name, "err", rerr)
			}
			cancel()
		}
		return nil, nil, fmt.Errorf("apply %s: %w", in.Name, err)
	}
	// A tagged request's device carries the tag into the guest's device
	// metadata (validation allows a tag only with count 1).
	tags := map[string]string{}
	for _, a := range in.PCIAliases {
		tags[a.Name] = a.Tag
	}
	for _, p := range held {
		if p.Alias == "" {
			continue // a direct entry: already in the spec
		}
		p.Tag = tags[p.Alias]
		in.PCIDevices = append(in.PCIDevices, p)
	}
	undo = func() {
		if len(claimed) == 0 {
			return
		}
		// The apply failed: give back what it claimed (burned devices stay
		// burned, and now need cleaning).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
		defer cancel()
		if err := c.devices.ReleaseFor(rctx, in.UUID, claimed); err != nil {
			c.log.Error("release the devices of a failed apply", "instance", in.Name, "devices", strings.Join(claimed, ","), "err", err)
		}
	}
	trim = func() {
		all, err := c.devices.HeldBy(ctx, in.UUID)
		if err != nil {
			c.log.Error("list the devices an instance holds", "instance", in.Name, "err", err)
			return
		}
		var extra []string
		for _, a := range all {
			if !slices.ContainsFunc(held, func(p model.PCIDevice) bool { return p.Address == a }) {
				extra = append(extra, a)
			}
		}
		if len(extra) == 0 {
			return
		}
		if err := c.devices.ReleaseFor(ctx, in.UUID, extra); err != nil {
			c.log.Error("release devices an instance no longer asks for", "instance", in.Name, "devices", strings.Join(extra, ","), "err", err)
		}
	}
	return undo, trim, nil
}

// releaseDevices releases what a deleted instance held; a failure is
// logged (the restart's orphan release catches it: the device stays out
// of the pool meanwhile).
func (c *Controller) releaseDevices(ctx context.Context, name, uuid string) {
	if c.devices == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	if err := c.devices.ReleaseFor(rctx, uuid, nil); err != nil {
		c.log.Error("release the devices of a deleted instance (they stay held until the next start)", "instance", name, "err", err)
	}
}

// undoTimeout bounds a device release that runs after its request's
// context may have ended.
const undoTimeout = 30 * time.Second

// keepGuestAddresses gives each passthrough device of in that has no
// guest address the one the stored spec old had for the same host
// device, so a redefined domain keeps the device where the guest saw it.
func keepGuestAddresses(old, in *model.Instance) {
	if old == nil {
		return
	}
	prev := map[string]string{}
	for _, p := range old.PCIDevices {
		if p.GuestAddress != "" && p.GuestAddress != "none" {
			prev[p.Address] = p.GuestAddress
		}
	}
	for i := range in.PCIDevices {
		if p := &in.PCIDevices[i]; p.GuestAddress == "" {
			p.GuestAddress = prev[p.Address]
		}
	}
}
