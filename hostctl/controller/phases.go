package controller

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// The parts (hostctl/part) are the host features the daemon registers
// (Options.Parts). The core knows none of them by name: it runs their
// phases over c.parts (part.Set, hostctl/part/run.go, selects the parts
// of a phase and runs them in order) at the points of each operation
// hostctl/part's doc lists. This file gives the parts their view of an
// instance (its flavor's extra specs, its image's properties, its
// record's host) for the phases that read it, and what the core asks of
// the parts besides the phases (their devices; their transports:
// transports.go).

// partView is what the parts see of in: its spec, its flavor's extra
// specs and its image's properties.
func (c *Controller) partView(ctx context.Context, in *model.Instance) (*part.Instance, error) {
	pi := &part.Instance{Spec: in}
	if len(c.parts) == 0 {
		return pi, nil
	}
	l := c.Layouts()
	f, err := l.FlavorOf(ctx, in.Flavor)
	if err != nil {
		return nil, err
	}
	if f != nil {
		pi.FlavorExtraSpecs = f.ExtraSpecs
	}
	img, err := l.ImageOf(ctx, in.Image)
	if err != nil {
		return nil, err
	}
	if img != nil {
		pi.ImageProperties = img.Properties
	}
	return pi, nil
}

// checkParts runs the parts' Check (part.Set.Check) for in, an instance
// of host (its record's; "": this host's or a new instance): a refusal
// wraps ErrState and names the part and its reason.
func (c *Controller) checkParts(ctx context.Context, op part.Op, in *model.Instance, host string) error {
	if len(c.parts) == 0 {
		return nil
	}
	pi, err := c.partView(ctx, in)
	if err != nil {
		return err
	}
	pi.Host = host
	return c.parts.Check(ctx, op, pi)
}

// CheckRecordParts lets the parts that act on op check rec, a stored
// instance of any host (checkParts: a refusal wraps ErrState).
func (c *Controller) CheckRecordParts(ctx context.Context, op part.Op, rec store.Instance) error {
	if len(c.parts) == 0 {
		return nil
	}
	in, err := decodeSpec(rec)
	if err != nil {
		return err
	}
	if err := c.checkParts(ctx, op, in, rec.Host); err != nil {
		return fmt.Errorf("%s %s: %w", op, rec.Name, err)
	}
	return nil
}

// preparePartsFor runs Prepare and hands the parts' devices (and fw_cfg
// entries) to the domain host will build, whose publish makes metadata
// revision rev (0: not known).
func (c *Controller) preparePartsFor(ctx context.Context, op part.Op, r *revert.Reverter, in *model.Instance, rev int64, host *virt.Host) error {
	if len(c.parts) == 0 {
		return nil
	}
	pi, err := c.partView(ctx, in)
	if err != nil {
		return err
	}
	pi.Revision = rev
	contrib, err := c.parts.Prepare(ctx, op, pi, r)
	if err != nil {
		return err
	}
	for _, d := range contrib.Devices {
		host.Extra = append(host.Extra, d.XML)
	}
	for _, f := range contrib.Firmware {
		host.Firmware = append(host.Firmware, virt.FirmwareFile{Name: f.Name, File: f.File})
	}
	return nil
}

// PreStart runs the parts' PreStart (part.PreStarter) before op (a
// start, a hard reboot) takes the instance's lock, with the stored spec
// of an instance this host owns and that may start (CheckRecordParts: a
// shelved one does not, it holds nothing).
func (c *Controller) PreStart(ctx context.Context, op part.Op, name string) error {
	if _, ok := part.First[part.PreStarter](c.parts, op); !ok {
		return nil
	}
	rec, err := c.OwnRecord(ctx, "start", name)
	if err != nil {
		return err
	}
	if err := c.CheckRecordParts(ctx, op, rec); err != nil {
		return err
	}
	in, err := decodeSpec(rec)
	if err != nil {
		return err
	}
	return c.parts.PreStart(ctx, op, &part.Instance{Spec: in})
}

// afterPhases are the after-phases, by the names afterRecordParts takes.
var afterPhases = map[string]func(part.Part, context.Context, *part.Instance) error{
	"start": part.Part.AfterStart, "stop": part.Part.AfterStop, "delete": part.Part.AfterDelete,
}

// afterRecordParts runs the after-phase phase ("start", "stop",
// "delete") of every part for a stored instance.
func (c *Controller) afterRecordParts(ctx context.Context, phase string, rec store.Instance) {
	c.afterStoredParts(ctx, phase, rec, "")
}

// afterStoredParts is afterRecordParts for the parts that act on op
// (every part when op is ""); what fails is logged (the operation
// stands).
func (c *Controller) afterStoredParts(ctx context.Context, phase string, rec store.Instance, op part.Op) {
	if len(c.parts) == 0 {
		return
	}
	in, err := decodeSpec(rec)
	if err != nil {
		c.log.Warn("parts not told after "+phase, "instance", rec.Name, "err", err)
		return
	}
	c.parts.After(ctx, afterPhases[phase], op, &part.Instance{Spec: in, Host: rec.Host}, func(name string, err error) {
		c.log.Warn("a part failed after "+phase, "part", name, "instance", rec.Name, "err", err)
	})
}

// partDevices lists the devices the parts give in (instance show). A
// part that cannot tell (its flavor or image changed under it) is shown
// as "unknown" with why.
func (c *Controller) partDevices(ctx context.Context, in *model.Instance) ([]HostDevice, error) {
	if len(c.parts) == 0 {
		return nil, nil
	}
	pi, err := c.partView(ctx, in)
	if err != nil {
		return nil, err
	}
	devs, _ := c.parts.Devices(pi)
	var out []HostDevice
	for _, d := range devs {
		out = append(out, HostDevice{Kind: d.Kind, Detail: d.Detail})
	}
	return out, nil
}

// partsChange names the change of the parts' devices from old to in (a
// new flavor's or image's watchdog), "" when there is none: the domain is
// then redefined as for any other hardware change.
func (c *Controller) partsChange(ctx context.Context, old, in *model.Instance) (string, error) {
	if len(c.parts) == 0 {
		return "", nil
	}
	xmlOf := func(in *model.Instance) (string, error) {
		pi, err := c.partView(ctx, in)
		if err != nil {
			return "", err
		}
		devs, err := c.parts.Devices(pi)
		var b []byte
		for _, d := range devs {
			b = append(append(b, d.XML...), '\n')
		}
		return string(b), err
	}
	was, err := xmlOf(old)
	if err != nil {
		// The stored instance's parts no longer agree with it (a flavor
		// changed under it): treat as changed, the new view decides.
		was = "?"
	}
	now, err := xmlOf(in)
	if err != nil {
		return "", err
	}
	if was == now {
		return "", nil
	}
	return "the host parts' devices", nil
}
