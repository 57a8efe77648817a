package controller

import (
	"context"
	"fmt"
	"slices"

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
// then does the domain boot. A domain is therefore never started by
// hostctl with a device its instance does not hold. Between a failed
// start and the next one, the inactive domain definition still names the
// released device; hostctl sets no autostart, so only an operator
// bypassing hostctl (virsh start) could boot it so — a known limit,
// recorded here rather than hidden.

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
		return nil
	}
	c.log.Info("the instance no longer holds the devices of its domain (an earlier start failed); claiming again and redefining", "name", name)
	if _, err := c.ApplyInstance(ctx, in); err != nil {
		return fmt.Errorf("start %s: claim devices again: %w", name, err)
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
	c.releaseDevices(ctx, name, uuid)
}
