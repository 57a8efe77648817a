package controller

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// What the parts (hostctl/parts/nics, hostctl/parts/passthrough) ask of
// the core, and the core's calls of their optional phases (part.Claimer,
// part.Definer, part.Starter, part.Remover, part.PreStarter).

// DomainDefinition returns the persistent XML of the instance's domain
// (nil without a hypervisor).
func (c *Controller) DomainDefinition(ctx context.Context, name string) ([]byte, error) {
	if c.domains == nil {
		return nil, nil
	}
	return c.domains.XML(ctx, name, false)
}

// AttachToDefinition adds the device element x to the persistent
// definition of the instance's domain.
func (c *Controller) AttachToDefinition(ctx context.Context, name string, x []byte) error {
	if c.hotplug == nil {
		return fmt.Errorf("attach to the definition of %s: %w", name, ErrNoHypervisor)
	}
	return c.hotplug.AttachDevice(ctx, name, x, virt.AffectConfig)
}

// Reapply applies in again (ApplyInstance: it takes the instance's lock).
func (c *Controller) Reapply(ctx context.Context, in *model.Instance) error {
	_, err := c.ApplyInstance(ctx, in)
	return err
}

// claimParts runs Claim of every part.Claimer that acts on op, before
// anything else of the operation changes; in is completed with what they
// took. The end it returns hands the operation's outcome to every claim,
// newest first.
func (c *Controller) claimParts(ctx context.Context, op part.Op, in, old *model.Instance) (func(context.Context, error), error) {
	var ends []func(context.Context, error)
	end := func(ctx context.Context, err error) {
		for i := len(ends) - 1; i >= 0; i-- {
			ends[i](ctx, err)
		}
	}
	pi := &part.Instance{Spec: in, Old: old}
	for _, p := range c.parts {
		cl, ok := p.(part.Claimer)
		if !ok || p.Answers()[op].Do != part.Act {
			continue
		}
		e, err := cl.Claim(ctx, op, pi)
		if err != nil {
			end(ctx, err)
			return nil, err
		}
		ends = append(ends, e)
	}
	return end, nil
}

// definedParts runs Defined of every part.Definer that acts on op, once
// in's domain is defined and read back (old is the spec before).
func (c *Controller) definedParts(ctx context.Context, op part.Op, r *revert.Reverter, old, in *model.Instance) error {
	pi := &part.Instance{Spec: in, Old: old}
	for _, p := range c.parts {
		d, ok := p.(part.Definer)
		if !ok || p.Answers()[op].Do != part.Act {
			continue
		}
		if err := d.Defined(ctx, op, pi, r); err != nil {
			return fmt.Errorf("%s: %w", p.Name(), err)
		}
	}
	return nil
}

// removeParts runs Remove of every part.Remover that acts on op (delete),
// after the instance's domain went and before its record goes.
func (c *Controller) removeParts(ctx context.Context, op part.Op, r *revert.Reverter, in *model.Instance) error {
	pi := &part.Instance{Spec: in}
	for _, p := range c.parts {
		rm, ok := p.(part.Remover)
		if !ok || p.Answers()[op].Do != part.Act {
			continue
		}
		if err := rm.Remove(ctx, op, pi, r); err != nil {
			return fmt.Errorf("%s: %w", p.Name(), err)
		}
	}
	return nil
}

// startParts runs BeforeStart of every part.Starter, right before in's
// domain starts; their undo steps go on r.
func (c *Controller) startParts(ctx context.Context, r *revert.Reverter, in *model.Instance) error {
	pi := &part.Instance{Spec: in}
	for _, p := range c.parts {
		if s, ok := p.(part.Starter); ok {
			if err := s.BeforeStart(ctx, pi, r); err != nil {
				return fmt.Errorf("%s: %w", p.Name(), err)
			}
		}
	}
	return nil
}

// preStartParts runs PreStart of every part.PreStarter that acts on op
// (start, hard reboot), before the operation takes the instance's lock,
// with the stored spec of an instance this host owns and that may start
// (a shelved one does not: it holds nothing).
func (c *Controller) preStartParts(ctx context.Context, op part.Op, name string) error {
	var ps []part.PreStarter
	for _, p := range c.parts {
		if s, ok := p.(part.PreStarter); ok && p.Answers()[op].Do == part.Act {
			ps = append(ps, s)
		}
	}
	if len(ps) == 0 {
		return nil
	}
	rec, err := c.ownRecord(ctx, "start", name)
	if err != nil {
		return err
	}
	if err := c.checkRecordParts(ctx, op, rec); err != nil { // parts.go (a shelved or rescued instance is refused)
		return err
	}
	in, err := decodeSpec(rec)
	if err != nil {
		return err
	}
	pi := &part.Instance{Spec: in}
	for _, s := range ps {
		if err := s.PreStart(ctx, op, pi); err != nil {
			return err
		}
	}
	return nil
}
