package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// The parts (hostctl/part) are the host features the daemon registers
// (Options.Parts). The core knows none of them by name: for every
// operation it calls each part's phases in registration order — Check
// before anything changes, Prepare while the domain is built (its
// devices go into virt.Host.Extra, its undo steps onto the operation's
// revert), AfterStart, AfterStop and AfterDelete after the hypervisor
// acted.

// partView is what the parts see of in: its spec, its flavor's extra
// specs and its image's properties.
func (c *Controller) partView(ctx context.Context, in *model.Instance) (*part.Instance, error) {
	pi := &part.Instance{Spec: in}
	if len(c.parts) == 0 {
		return pi, nil
	}
	f, err := c.flavorOf(ctx, in.Flavor)
	if err != nil {
		return nil, err
	}
	if f != nil {
		pi.FlavorExtraSpecs = f.ExtraSpecs
	}
	img, err := c.imageOf(ctx, in.Image)
	if err != nil {
		return nil, err
	}
	if img != nil {
		pi.ImageProperties = img.Properties
	}
	return pi, nil
}

// checkParts asks every part that does not answer Nothing for op whether
// it refuses op for in. A refusal wraps ErrState and names the part and
// its reason.
func (c *Controller) checkParts(ctx context.Context, op part.Op, in *model.Instance) error {
	return c.checkPartsOn(ctx, op, in, "")
}

// checkPartsOn is checkParts for an instance of host (its record's).
func (c *Controller) checkPartsOn(ctx context.Context, op part.Op, in *model.Instance, host string) error {
	if len(c.parts) == 0 {
		return nil
	}
	pi, err := c.partView(ctx, in)
	if err != nil {
		return err
	}
	pi.Host = host
	for _, p := range c.parts {
		if p.Answers()[op].Do == part.Nothing {
			continue
		}
		if err := p.Check(ctx, op, pi); err != nil {
			if _, refused := errors.AsType[*part.RefusedError](err); refused {
				return fmt.Errorf("%w: %w", ErrState, err)
			}
			return err // bad input (a *model.SpecError) as the part says
		}
	}
	return nil
}

// checkRecordParts is checkParts for a stored instance.
func (c *Controller) checkRecordParts(ctx context.Context, op part.Op, rec store.Instance) error {
	if len(c.parts) == 0 {
		return nil
	}
	in, err := decodeSpec(rec)
	if err != nil {
		return err
	}
	if err := c.checkPartsOn(ctx, op, in, rec.Host); err != nil {
		return fmt.Errorf("%s %s: %w", op, rec.Name, err)
	}
	return nil
}

// prepareParts runs Prepare of every part that acts on op and hands
// their devices (and fw_cfg entries) to the domain host will build.
func (c *Controller) prepareParts(ctx context.Context, op part.Op, r *revert.Reverter, in *model.Instance, host *virt.Host) error {
	return c.preparePartsFor(ctx, op, r, in, 0, host)
}

// preparePartsFor is prepareParts for a domain whose publish makes
// metadata revision rev (0: not known).
func (c *Controller) preparePartsFor(ctx context.Context, op part.Op, r *revert.Reverter, in *model.Instance, rev int64, host *virt.Host) error {
	if len(c.parts) == 0 {
		return nil
	}
	pi, err := c.partView(ctx, in)
	if err != nil {
		return err
	}
	pi.Revision = rev
	var contrib part.Contribution
	for _, p := range c.parts {
		if p.Answers()[op].Do != part.Act {
			continue
		}
		if err := p.Prepare(ctx, op, pi, r, &contrib); err != nil {
			return fmt.Errorf("%s: %w", p.Name(), err)
		}
	}
	for _, d := range contrib.Devices {
		host.Extra = append(host.Extra, d.XML)
	}
	for _, f := range contrib.Firmware {
		host.Firmware = append(host.Firmware, virt.FirmwareFile{Name: f.Name, File: f.File})
	}
	return nil
}

// afterParts runs one after-phase (AfterStart, AfterStop, AfterDelete)
// of every part (only of those that act on op, when op is not ""); what
// fails is logged (the operation stands).
func (c *Controller) afterParts(ctx context.Context, phase string, pi *part.Instance, op part.Op) {
	if len(c.parts) == 0 {
		return
	}
	for _, p := range c.parts {
		if op != "" && p.Answers()[op].Do != part.Act {
			continue
		}
		var err error
		switch phase {
		case "start":
			err = p.AfterStart(ctx, pi)
		case "stop":
			err = p.AfterStop(ctx, pi)
		case "delete":
			err = p.AfterDelete(ctx, pi)
		}
		if err != nil {
			c.log.Warn("a part failed after "+phase, "part", p.Name(), "instance", pi.Spec.Name, "err", err)
		}
	}
}

// afterRecordParts is afterParts for a stored instance.
func (c *Controller) afterRecordParts(ctx context.Context, phase string, rec store.Instance) {
	c.afterStoredParts(ctx, phase, rec, "")
}

func (c *Controller) afterStoredParts(ctx context.Context, phase string, rec store.Instance, op part.Op) {
	if len(c.parts) == 0 {
		return
	}
	in, err := decodeSpec(rec)
	if err != nil {
		c.log.Warn("parts not told after "+phase, "instance", rec.Name, "err", err)
		return
	}
	c.afterParts(ctx, phase, &part.Instance{Spec: in, Host: rec.Host}, op)
}

// partDevices lists the devices the parts give in (instance show).
func (c *Controller) partDevices(ctx context.Context, in *model.Instance) ([]HostDevice, error) {
	if len(c.parts) == 0 {
		return nil, nil
	}
	pi, err := c.partView(ctx, in)
	if err != nil {
		return nil, err
	}
	var out []HostDevice
	for _, p := range c.parts {
		devs, err := p.Devices(pi)
		if err != nil {
			// Show the instance anyway (its flavor or image changed under
			// it): the part's entry says what is wrong.
			out = append(out, HostDevice{Kind: p.Name(), Detail: "unknown: " + err.Error()})
			continue
		}
		for _, d := range devs {
			out = append(out, HostDevice{Kind: d.Kind, Detail: d.Detail})
		}
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
		var b []byte
		for _, p := range c.parts {
			devs, err := p.Devices(pi)
			if err != nil {
				return "", fmt.Errorf("%s: %w", p.Name(), err)
			}
			for _, d := range devs {
				b = append(append(b, d.XML...), '\n')
			}
		}
		return string(b), nil
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
