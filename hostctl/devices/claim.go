package devices

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// Claim gives consumer the devices its pci_aliases request. It is
// idempotent: devices the consumer already holds count (re-applying an
// instance, or rebuilding it, keeps its devices), and only the missing
// ones are claimed. Every device claimed, and every one-time-use device
// burned (reserved = total), is written in ONE compare-and-swap of the
// host's group, before the domain can run with it. It returns every
// device the consumer holds for reqs, by address, and the addresses
// claimed now (what a failed apply releases).
//
// Errors, each changing nothing: an alias no device_spec entry names
// (model.SpecError on pci_aliases[i].name), a count larger than the
// alias's pool (pci_aliases[i].count), and no free device (ErrUnavailable
// with store.ErrConflict, saying how many are burned and in use).
func (inv *Inventory) Claim(ctx context.Context, c Consumer, reqs []model.PCIAlias) (held []Device, claimed []string, err error) {
	return inv.ClaimDevices(ctx, c, reqs, nil)
}

// ClaimDevices is Claim with the instance's direct pci_devices entries
// too (devices named by address, outside the device spec; entries hostctl
// added for pci_aliases, Alias set, are not direct). A direct entry marked
// one_time_use is claimed and burned like an alias claim, in the same
// compare-and-swap: its record (alias empty, not present: never claimed by
// an alias) is created on first use, and after release it needs cleaning
// like any other. Any direct entry naming a record held by another
// instance, or burned and awaiting cleaning, is refused (ErrUnavailable),
// whether it is marked one_time_use or not; one the consumer already
// holds stays held even if no longer marked (un-marking never un-burns).
// The devices returned include the direct ones the consumer holds.
func (inv *Inventory) ClaimDevices(ctx context.Context, c Consumer, reqs []model.PCIAlias, direct []model.PCIDevice) (held []Device, claimed []string, err error) {
	if len(reqs) == 0 && len(direct) == 0 {
		return nil, nil, nil
	}
	aliases := inv.spec.Load().Aliases()
	var fe []model.FieldError
	for i, r := range reqs {
		if !aliases[r.Name] {
			fe = append(fe, model.FieldError{Field: fmt.Sprintf("pci_aliases[%d].name", i), Value: r.Name,
				Rule: fmt.Sprintf("unknown alias: no device_spec entry of host %s has it", inv.host)})
		}
	}
	for i, p := range direct {
		if err := checkAddress(p.Address); err != nil || p.Alias != "" {
			fe = append(fe, model.FieldError{Field: fmt.Sprintf("pci_devices[%d].address", i), Value: p.Address,
				Rule: "is not a direct entry (a PCI address without an alias)"})
		}
	}
	if len(fe) > 0 {
		return nil, nil, &model.SpecError{Errors: fe}
	}
	var burned []Device
	err = inv.retry(ctx, "claim devices", func() error {
		cur, err := inv.load(ctx, inv.group)
		if err != nil {
			return err
		}
		held, claimed, burned = nil, nil, nil
		var ops []store.GroupOp
		var devs []Device
		now := inv.now().UTC()
		var fe []model.FieldError
		var unavailable []string
		for i, r := range reqs {
			var mine, free []entry
			pool, inUse, toClean, absent := 0, 0, 0, 0
			for _, e := range cur {
				d := e.dev
				if d.Alias != r.Name {
					continue
				}
				switch {
				case d.Consumer == c.UUID && d.Used > 0:
					mine = append(mine, e)
					pool++
				case !d.Present:
					absent++
				case d.Used > 0:
					inUse++
					pool++
				case d.Reserved >= d.Total:
					toClean++
					pool++
				default:
					free = append(free, e)
					pool++
				}
			}
			if r.Count > pool {
				note := ""
				if absent > 0 {
					note = fmt.Sprintf(" (%d more not present)", absent)
				}
				fe = append(fe, model.FieldError{Field: fmt.Sprintf("pci_aliases[%d].count", i), Value: r.Count,
					Rule: fmt.Sprintf("more than the %d %s of alias %s on host %s%s", pool, plural(pool, "device"), r.Name, inv.host, note)})
				continue
			}
			slices.SortFunc(mine, func(a, b entry) int { return strings.Compare(a.dev.Address, b.dev.Address) })
			for _, e := range mine[:min(len(mine), r.Count)] {
				held = append(held, e.dev)
			}
			need := r.Count - len(mine)
			if need <= 0 {
				continue
			}
			if need > len(free) {
				msg := fmt.Sprintf("alias %s: %d burned awaiting cleaning, %d in use", r.Name, toClean, inUse)
				if len(free) > 0 {
					msg += fmt.Sprintf(", %d free of %d needed", len(free), need)
				}
				if absent > 0 {
					msg += fmt.Sprintf(", %d not present", absent)
				}
				unavailable = append(unavailable, msg)
				continue
			}
			// A random pick spreads concurrent claimers over the pool.
			rand.Shuffle(len(free), func(a, b int) { free[a], free[b] = free[b], free[a] })
			for _, e := range free[:need] {
				d := e.dev
				d.Used, d.Consumer, d.ConsumerName = 1, c.UUID, c.Name
				if d.OneTimeUse {
					d.Reserved = d.Total
					d.BurnedAt = &now
					d.ReleasedAt, d.LastCleanupHook = nil, nil
				}
				ops = append(ops, putOp(d, e.version))
				devs = append(devs, d)
			}
		}
		byAddr := map[string]entry{}
		for _, e := range cur {
			byAddr[e.dev.Address] = e
		}
		for i, p := range direct {
			e, exists := byAddr[p.Address]
			d := e.dev
			switch {
			case exists && d.Alias != "":
				fe = append(fe, model.FieldError{Field: fmt.Sprintf("pci_devices[%d].address", i), Value: p.Address,
					Rule: fmt.Sprintf("is a device of host %s's inventory (alias %s): request it through pci_aliases", inv.host, d.Alias)})
			case exists && d.Used > 0 && d.Consumer == c.UUID:
				held = append(held, d)
			case exists && d.Used > 0:
				unavailable = append(unavailable, fmt.Sprintf("pci_devices[%d] %s: one-time-use, in use by instance %s", i, p.Address, d.ConsumerName))
			case exists && d.Reserved >= d.Total:
				unavailable = append(unavailable, fmt.Sprintf("pci_devices[%d] %s: burned awaiting cleaning (used by instance %s; hostctl device clean %s)", i, p.Address, d.ConsumerName, p.Address))
			case p.OneTimeUse:
				if !exists {
					d = Device{Address: p.Address, Host: inv.host, Total: 1}
				}
				d.OneTimeUse, d.Present = true, false
				d.Traits = traits(d)
				d.Used, d.Consumer, d.ConsumerName = 1, c.UUID, c.Name
				d.Reserved, d.BurnedAt = d.Total, &now
				d.ReleasedAt, d.LastCleanupHook = nil, nil
				ops = append(ops, putOp(d, e.version))
				devs = append(devs, d)
			}
		}
		if len(fe) > 0 {
			return &model.SpecError{Errors: fe}
		}
		if len(unavailable) > 0 {
			return fmt.Errorf("%w for %s: %s: %w", ErrUnavailable, c.Name, strings.Join(unavailable, "; "), store.ErrConflict)
		}
		if len(ops) == 0 {
			return nil
		}
		written, err := inv.commit(ctx, ops, devs)
		if err != nil {
			return err
		}
		for _, d := range written {
			held = append(held, d)
			claimed = append(claimed, d.Address)
			if d.OneTimeUse {
				burned = append(burned, d)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("claim devices for %s: %w", c.Name, err)
	}
	for _, d := range burned {
		inv.log.Info("one-time-use device claimed and burned", "address", d.Address, "alias", d.Alias, "instance", c.Name)
		inv.emit(ctx, EventBurned, d)
	}
	slices.SortFunc(held, func(a, b Device) int { return strings.Compare(a.Address, b.Address) })
	return held, claimed, nil
}

func plural(n int, s string) string {
	if n == 1 {
		return s
	}
	return s + "s"
}

// Release gives back the devices consumer holds (only those in addrs when
// addrs is not nil): used = 0, consumer cleared. Reserved is never
// touched, so a burned device stays out of the pool and now needs
// cleaning: that emits EventReleased and runs the cleanup hook.
func (inv *Inventory) Release(ctx context.Context, consumerUUID string, addrs []string) ([]Device, error) {
	var released []Device
	err := inv.retry(ctx, "release devices", func() error {
		cur, err := inv.load(ctx, inv.group)
		if err != nil {
			return err
		}
		var ops []store.GroupOp
		var devs []Device
		now := inv.now().UTC()
		for _, e := range cur {
			d := e.dev
			if d.Consumer != consumerUUID || d.Used == 0 || (addrs != nil && !slices.Contains(addrs, d.Address)) {
				continue
			}
			d.Used, d.Consumer = 0, ""
			if d.Reserved >= d.Total {
				d.ReleasedAt = &now
			}
			ops = append(ops, putOp(d, e.version))
			devs = append(devs, d)
		}
		if len(ops) == 0 {
			released = nil
			return nil
		}
		released, err = inv.commit(ctx, ops, devs)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("release devices of %s: %w", consumerUUID, err)
	}
	for _, d := range released {
		inv.log.Info("device released", "address", d.Address, "instance", d.ConsumerName, "needs_cleaning", d.NeedsCleaning)
		if d.Reserved >= d.Total {
			inv.emit(ctx, EventReleased, d)
			if inv.hook != nil {
				inv.hook.Run(d)
			}
		}
	}
	return released, nil
}

// ReleaseOrphans releases every device held by a consumer that live says
// is not an instance of this host (an apply that died between the claim
// and its store write, or an instance deleted while hostctl was down). Run
// it at start, before instances are applied.
func (inv *Inventory) ReleaseOrphans(ctx context.Context, live func(uuid string) bool) ([]Device, error) {
	cur, err := inv.load(ctx, inv.group)
	if err != nil {
		return nil, err
	}
	var out []Device
	done := map[string]bool{}
	for _, e := range cur {
		c := e.dev.Consumer
		if e.dev.Used == 0 || c == "" || done[c] || live(c) {
			continue
		}
		done[c] = true
		inv.log.Warn("device held by an instance this host does not have: releasing it", "address", e.dev.Address, "consumer", c, "consumer_name", e.dev.ConsumerName)
		rel, err := inv.Release(ctx, c, nil)
		if err != nil {
			return out, err
		}
		out = append(out, rel...)
	}
	return out, nil
}

// Held returns the devices consumer holds.
func (inv *Inventory) Held(ctx context.Context, consumerUUID string) ([]Device, error) {
	cur, err := inv.load(ctx, inv.group)
	if err != nil {
		return nil, err
	}
	var out []Device
	for _, e := range cur {
		if e.dev.Consumer == consumerUUID && e.dev.Used > 0 {
			out = append(out, e.dev)
		}
	}
	return out, nil
}

// Managed reports whether addr is a device of this host's device spec
// (an instance may then get it only through pci_aliases), and its alias.
// The record of a one-time-use device named directly in pci_devices (no
// alias) is not: ClaimDevices decides about it.
func (inv *Inventory) Managed(ctx context.Context, addr string) (string, bool, error) {
	d, err := inv.Show(ctx, addr)
	if errors.Is(err, store.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return d.Alias, d.Alias != "", nil
}

// Clean is the operator saying the device is clean: reserved back to 0,
// so it rejoins the pool. Refused while the device is in use.
func (inv *Inventory) Clean(ctx context.Context, addr string) (Device, error) {
	if err := checkAddress(addr); err != nil {
		return Device{}, err
	}
	var out Device
	var changed bool
	err := inv.retry(ctx, "clean device", func() error {
		cur, err := inv.load(ctx, inv.group)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(cur, func(e entry) bool { return e.dev.Address == addr })
		if i < 0 {
			return fmt.Errorf("device %s of host %s: %w", addr, inv.host, store.ErrNotFound)
		}
		d := cur[i].dev
		if d.Used > 0 {
			return &refusal{fmt.Sprintf("device %s is in use by instance %s (%s): it can be cleaned once the instance is deleted",
				addr, d.ConsumerName, d.Consumer)}
		}
		changed = d.Reserved != 0
		if !changed {
			out = d
			return nil
		}
		now := inv.now().UTC()
		d.Reserved, d.CleanedAt = 0, &now
		w, err := inv.commit(ctx, []store.GroupOp{putOp(d, cur[i].version)}, []Device{d})
		if err != nil {
			return err
		}
		out = w[0]
		return nil
	})
	if err != nil {
		return Device{}, fmt.Errorf("clean: %w", err)
	}
	if changed {
		inv.log.Info("device cleaned by the operator: back in the pool", "address", addr)
		inv.emit(ctx, EventCleaned, out)
	}
	return out, nil
}

// ListDevices is List for the admin API (api.DeviceService).
func (inv *Inventory) ListDevices(ctx context.Context, needsCleaning bool, trait string, allHosts bool) ([]Device, error) {
	return inv.List(ctx, Filter{NeedsCleaning: needsCleaning, Trait: trait, AllHosts: allHosts})
}

// ClaimFor is ClaimDevices for the controller (controller.Devices): the
// devices held as pci_devices entries of the instance spec (Alias empty
// for the direct ones).
func (inv *Inventory) ClaimFor(ctx context.Context, uuid, name string, reqs []model.PCIAlias, direct []model.PCIDevice) ([]model.PCIDevice, []string, error) {
	held, claimed, err := inv.ClaimDevices(ctx, Consumer{UUID: uuid, Name: name}, reqs, direct)
	if err != nil {
		return nil, nil, err
	}
	out := make([]model.PCIDevice, len(held))
	for i, d := range held {
		out[i] = model.PCIDevice{Address: d.Address, OneTimeUse: d.OneTimeUse, Alias: d.Alias}
	}
	return out, claimed, nil
}

// ReleaseFor is Release for the controller.
func (inv *Inventory) ReleaseFor(ctx context.Context, uuid string, addrs []string) error {
	_, err := inv.Release(ctx, uuid, addrs)
	return err
}

// HeldBy lists the addresses of the devices consumer holds.
func (inv *Inventory) HeldBy(ctx context.Context, uuid string) ([]string, error) {
	held, err := inv.Held(ctx, uuid)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(held))
	for i, d := range held {
		out[i] = d.Address
	}
	return out, nil
}
