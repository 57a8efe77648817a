// Package passthrough is the host part of an instance's passthrough PCI
// devices (hostctl/part) across shelve and unshelve: Nova's shelve
// offload gives the host's resources back, its PCI claims included, and
// unshelve claims them again.
//
// Shelve releases every device the instance holds (a one-time-use device
// stays burned: it needs cleaning before anyone, this instance included,
// has it again); unshelve claims the instance's pci_aliases and direct
// one-time-use entries again — the same devices when they are free,
// another of the alias otherwise — and completes the spec with what it
// holds, keeping each unchanged device's guest address. A direct
// one-time-use device burned by the shelve refuses the unshelve (the
// inventory names it) until it is cleaned.
//
// An apply claims the instance's pci_aliases (and burns one-time-use
// devices, in the same atomic write) before the core plans its domain
// (claim.go); the instance holds them while it exists — stopped, running,
// in ERROR, after a failed start (start.go) — and delete releases them.
package passthrough

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// Inventory is the host's device inventory (hostctl/devices) as the part
// uses it.
type Inventory interface {
	// ClaimFor gives instance uuid the devices its aliases request and
	// burns its direct one-time-use entries; it returns what the
	// instance holds and the addresses this call claimed.
	ClaimFor(ctx context.Context, uuid, name string, reqs []model.PCIAlias, direct []model.PCIDevice) (held []model.PCIDevice, claimed []string, err error)
	// ReleaseFor releases what the instance holds (only addrs when not
	// nil); one-time-use devices stay burned.
	ReleaseFor(ctx context.Context, uuid string, addrs []string) error
	// HeldBy lists the addresses the instance holds.
	HeldBy(ctx context.Context, uuid string) ([]string, error)
	// Managed reports whether addr is a device of the device spec, and
	// its alias.
	Managed(ctx context.Context, addr string) (alias string, ok bool, err error)
}

// Core is the controller core as the part calls it back.
type Core interface {
	// Reapply applies in again as ApplyInstance does (taking the
	// instance's lock): the domain is redefined with what it holds and
	// the metadata republished.
	Reapply(ctx context.Context, in *model.Instance) error
}

// Definitions is the hypervisor (*virt.Conn) as the part uses it: the
// persistent definition of an instance's domain (XML, live false), and a
// device added to it (virt.AffectConfig).
type Definitions interface {
	XML(ctx context.Context, name string, live bool) ([]byte, error)
	AttachDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error
}

// Part is the passthrough devices part.
type Part struct {
	inv  Inventory
	core Core
	defs Definitions // nil: no hypervisor
	log  *slog.Logger
}

var (
	_ part.Claimer    = (*Part)(nil)
	_ part.PreStarter = (*Part)(nil)
)

// New returns the part over the host's inventory (nil: the host has
// none; pci_aliases and one_time_use are refused).
func New(inv Inventory) *Part { return &Part{inv: inv, log: slog.Default()} }

// Bind gives the part the controller core and the hypervisor's domain
// definitions (nil: none; a start heals the claims an earlier hostctl
// released only with the core), and its logger; call it before the core
// serves.
func (p *Part) Bind(core Core, defs Definitions, log *slog.Logger) {
	p.core, p.defs = core, defs
	if log != nil {
		p.log = log
	}
}

// Name implements part.Part.
func (*Part) Name() string { return "passthrough" }

// Answers implements part.Part.
func (*Part) Answers() part.Answers {
	nothing := part.Answer{Do: part.Nothing}
	start := part.Answer{Do: part.Act, Why: "makes sure the instance holds its domain's devices before the start (start.go); a failed start keeps them"}
	carried := part.Answer{Do: part.Nothing, Why: "the spec carries the devices the instance holds"}
	return part.Answers{
		part.Apply:            {Do: part.Act, Why: "claims the aliases and burns one-time-use entries before the domain is planned (claim.go)"},
		part.Start:            start,
		part.Stop:             {Do: part.Nothing, Why: "a stopped instance keeps its devices (Nova keeps allocations)"},
		part.RebootSoft:       nothing,
		part.RebootHard:       start,
		part.Delete:           {Do: part.Act, Why: "releases every claim once the instance is gone (a burned device stays burned)"},
		part.ForceDelete:      {Do: part.Nothing, Why: "the dead host's inventory records are released by that host's orphan release"},
		part.Adopt:            {Do: part.Nothing, Why: "the devices are the old host's; the adopting apply claims this host's"},
		part.Shelve:           {Do: part.Act, Why: "releases every claim (a burned device stays burned)"},
		part.Unshelve:         {Do: part.Act, Why: "claims the aliases and one-time-use entries again"},
		part.Rescue:           {Do: part.Nothing, Why: "the rescue domain keeps the instance's devices"},
		part.Unrescue:         nothing,
		part.Resize:           carried,
		part.Rebuild:          carried,
		part.Snapshot:         nothing,
		part.MigrateCold:      {Do: part.Act, Why: "the destination's apply claims a new device (a one-time-use one burned before the domain starts there); the source keeps its claims until the move ends"},
		part.MigrateLive:      {Do: part.Act, Why: "refused unless every device the instance holds is live_migratable (Check); the destination claims a new device (a one-time-use one burned), the source's stays burned and its claims are released (Moved)"},
		part.ConfirmMigration: {Do: part.Act, Why: "the source's claims are released (Moved); its burned device stays burned"},
		part.RevertMigration:  {Do: part.Act, Why: "the destination's claims are released (Moved); its one-time-use device stays burned"},
		part.Evacuate:         {Do: part.Act, Why: "the new host's apply claims and burns a new device; the dead host releases its claims when it comes back (Moved), its burned device stays burned until an operator cleans it"},
	}
}

// Check implements part.Part: a live migration of an instance holding a
// device that is not live_migratable is refused, naming it (live.go);
// nothing else is refused here (an unshelve whose burned device is not
// clean is refused by the claim, naming it).
func (p *Part) Check(ctx context.Context, op part.Op, in *part.Instance) error {
	if op == part.MigrateLive {
		return p.checkLive(ctx, in.Spec)
	}
	return nil
}

// undoTimeout bounds an undo step or a release run after its request's
// context may have ended.
const undoTimeout = 30 * time.Second

// uses reports whether in holds or asks for inventory devices.
func uses(in *model.Instance) bool {
	return len(in.PCIAliases) > 0 || slices.ContainsFunc(in.PCIDevices, func(p model.PCIDevice) bool { return p.OneTimeUse || p.Alias != "" })
}

// direct is in's pci_devices entries that are not alias claims.
func direct(in *model.Instance) []model.PCIDevice {
	return slices.DeleteFunc(slices.Clone(in.PCIDevices), func(p model.PCIDevice) bool { return p.Alias != "" })
}

// Prepare implements part.Part: shelve releases, unshelve claims again.
func (p *Part) Prepare(ctx context.Context, op part.Op, pi *part.Instance, r *revert.Reverter, _ *part.Contribution) error {
	in := pi.Spec
	if p.inv == nil || !uses(in) {
		return nil
	}
	switch op {
	case part.Shelve:
		if err := p.inv.ReleaseFor(ctx, in.UUID, nil); err != nil {
			return fmt.Errorf("release the passthrough devices: %w", err)
		}
		r.Add("claim the passthrough devices of "+in.Name+" again", func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
			defer cancel()
			_, _, err := p.inv.ClaimFor(ctx, in.UUID, in.Name, in.PCIAliases, direct(in))
			return err
		})
	case part.Unshelve:
		held, claimed, err := p.inv.ClaimFor(ctx, in.UUID, in.Name, in.PCIAliases, direct(in))
		if err != nil {
			return fmt.Errorf("claim the passthrough devices again: %w", err)
		}
		r.Add("release the passthrough devices claimed for "+in.Name, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
			defer cancel()
			return p.inv.ReleaseFor(ctx, in.UUID, claimed)
		})
		complete(in, held)
	}
	return nil
}

// complete replaces in's alias entries by the devices held, with their
// request's tag, keeping the guest address of a device it had before.
func complete(in *model.Instance, held []model.PCIDevice) {
	guest := map[string]string{}
	for _, d := range in.PCIDevices {
		if d.Alias != "" && d.GuestAddress != "" && d.GuestAddress != "none" {
			guest[d.Address] = d.GuestAddress
		}
	}
	tags := map[string]string{}
	for _, a := range in.PCIAliases {
		tags[a.Name] = a.Tag
	}
	out := direct(in)
	for _, d := range held {
		if d.Alias == "" {
			continue
		}
		d.Tag, d.GuestAddress = tags[d.Alias], guest[d.Address]
		out = append(out, d)
	}
	in.PCIDevices = out
}

// Devices implements part.Part: the devices are listed with the guest's
// device metadata already (instance show's Devices).
func (*Part) Devices(*part.Instance) ([]part.Device, error) { return nil, nil }

// AfterStart implements part.Part.
func (*Part) AfterStart(context.Context, *part.Instance) error { return nil }

// AfterStop implements part.Part.
func (*Part) AfterStop(context.Context, *part.Instance) error { return nil }

// AfterDelete implements part.Part: what the deleted instance held is
// released. A failure is returned for the core to log: the restart's
// orphan release catches it, the device stays out of the pool meanwhile.
func (p *Part) AfterDelete(ctx context.Context, in *part.Instance) error {
	if p.inv == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	if err := p.inv.ReleaseFor(rctx, in.Spec.UUID, nil); err != nil {
		return fmt.Errorf("release the devices of deleted instance %s (they stay held until the next start): %w", in.Spec.Name, err)
	}
	return nil
}

// Moved implements part.Mover: the instance left this host, so its
// claims on this host's inventory are released; a one-time-use device
// stays burned (the specification: the source's on confirm, the
// destination's on revert).
func (p *Part) Moved(ctx context.Context, _ part.Op, in *part.Instance) error {
	if p.inv == nil {
		return nil
	}
	if err := p.inv.ReleaseFor(ctx, in.Spec.UUID, nil); err != nil {
		return fmt.Errorf("release the devices of moved instance %s on this host: %w", in.Spec.Name, err)
	}
	return nil
}
