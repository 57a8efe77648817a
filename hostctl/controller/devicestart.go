package controller

import (
	"context"
	"fmt"
	"slices"

	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
)

// Devices across start: apply claims an instance's pci_aliases (and burns
// one-time-use devices) before it defines the domain with their
// <hostdev>s, and the instance holds them while it is stopped and
// running. A start that fails releases them (used = 0; a one-time-use
// device stays reserved, needing cleaning): the issue's rule "releasing
// (instance deleted, or its start failed) sets used = 0". The next start
// claims again before it boots: when the instance no longer holds every
// device its domain names, the stored spec is applied again — its
// pci_aliases are claimed (a burned device is not free, so another one is
// taken), the shut-off domain is redefined with the new <hostdev>s and
// the metadata (the devices' guest addresses) republished — and only
// then does the domain boot. The failed start also takes the released
// devices' <hostdev>s out of the domain's definition (virsh start cannot
// boot it with them), and the next start puts back the <hostdev> of each
// device it holds that the definition lacks. A domain is therefore never
// started with a device its instance does not hold.

// reclaimForStart claims again what a failed start released, before
// Start takes the instance's lock (the apply takes it too).
func (c *Controller) reclaimForStart(ctx context.Context, name string) error {
	if c.devices == nil {
		return nil
	}
	rec, err := c.ownRecord(ctx, "start", name)
	if err != nil {
		return err
	}
	in, err := decodeSpec(rec)
	if err != nil {
		return err
	}
	if len(in.PCIAliases) == 0 {
		return nil
	}
	held, err := c.devices.HeldBy(ctx, in.UUID)
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	if holdsAll(in, held) {
		return c.restoreHostdevs(ctx, in, held)
	}
	c.log.Info("the instance no longer holds the devices of its domain (an earlier start failed); claiming again", "name", name)
	got, _, err := c.devices.ClaimFor(ctx, in.UUID, in.Name, in.PCIAliases)
	if err != nil {
		return fmt.Errorf("start %s: claim devices again: %w", name, err)
	}
	// Devices claimed again unchanged go back into the definition as they
	// were; when any is another device, the stored spec is applied again:
	// the domain is redefined with the devices held and the metadata (their
	// guest addresses) republished.
	held = held[:0]
	for _, p := range got {
		held = append(held, p.Address)
	}
	if err := c.restoreHostdevs(ctx, in, slices.DeleteFunc(slices.Clone(held), func(a string) bool {
		return !slices.ContainsFunc(in.PCIDevices, func(p model.PCIDevice) bool { return p.Alias != "" && p.Address == a })
	})); err != nil {
		return err
	}
	if holdsAll(in, held) {
		return nil
	}
	c.log.Info("redefining the domain with the devices claimed again", "name", name, "devices", held)
	if _, err := c.ApplyInstance(ctx, in); err != nil {
		return fmt.Errorf("start %s: redefine with the devices claimed again: %w", name, err)
	}
	return nil
}

// restoreHostdevs puts back into the domain's definition the <hostdev> of
// every held device it lacks: a failed start took them out, and a device
// claimed again unchanged leaves the spec unchanged, so the apply did not
// redefine the domain. Each goes back at the guest address the stored
// spec has for it, where the published metadata says it is.
func (c *Controller) restoreHostdevs(ctx context.Context, in *model.Instance, held []string) error {
	name := in.Name
	if c.domains == nil || c.hotplug == nil || len(held) == 0 {
		return nil
	}
	doc, err := c.domains.XML(ctx, name, false)
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
		for _, p := range in.PCIDevices {
			if p.Address == a {
				guest = p.GuestAddress
			}
		}
		x, err := virt.HostdevXML(a, guest)
		if err == nil {
			err = c.hotplug.AttachDevice(ctx, name, x, virt.AffectConfig)
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
	for _, p := range in.PCIDevices {
		if p.Alias != "" {
			mine = append(mine, p.Address)
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

// releaseAfterFailedStart gives back what the instance holds after its
// start failed; a failure to release is logged (the device stays out of
// the pool, held, until the instance is deleted or started again).
func (c *Controller) releaseAfterFailedStart(ctx context.Context, name, uuid string, cause error) {
	if c.devices == nil {
		return
	}
	held, err := c.devices.HeldBy(ctx, uuid)
	if err != nil || len(held) == 0 {
		if err != nil {
			c.log.Error("list the devices of an instance whose start failed", "instance", name, "err", err)
		}
		return
	}
	c.log.Warn("start failed: releasing the instance's devices (one-time-use ones stay burned)", "instance", name, "devices", held, "cause", cause)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	if err := c.devices.ReleaseFor(rctx, uuid, nil); err != nil {
		c.log.Error("release the devices of an instance whose start failed (they stay held)", "instance", name, "err", err)
		return
	}
	// The domain's definition no longer names them, so nothing boots it
	// with a device it does not hold (the next start puts back what it
	// claims).
	if c.hotplug == nil {
		return
	}
	for _, a := range held {
		x, err := virt.HostdevXML(a, "")
		if err == nil {
			err = c.hotplug.DetachDevice(rctx, name, x, virt.AffectConfig)
		}
		if err != nil {
			c.log.Error("remove a released device's hostdev from the domain definition", "instance", name, "device", a, "err", err)
		}
	}
}
