package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// The core as the shares part (hostctl/shares) calls it: its
// shares.Instances and shares.LiveCore. They name no type of this
// package, so that hostctl/shares does not import it.

// DomainState is the instance's state as Get gives it ("" without a
// hypervisor).
func (c *Controller) DomainState(ctx context.Context, name string) (string, error) {
	inst, err := c.Get(ctx, name)
	if err != nil {
		return "", err
	}
	return inst.State, nil
}

// Hypervisor reports whether instances have domains here (false with
// --virt none).
func (c *Controller) Hypervisor() bool {
	_, ok := c.drv.(libvirtDriver)
	return ok
}

// LiveXML is the running domain's XML of this host's instance name (the
// shares part asks before a live attach changes anything).
func (c *Controller) LiveXML(ctx context.Context, name string) ([]byte, error) {
	if _, err := c.ownRecord(ctx, "attach share to", name); err != nil {
		return nil, err
	}
	if err := c.drv.require("attach share to", name); err != nil {
		return nil, err
	}
	doc, err := c.domains.XML(ctx, name, true)
	if err != nil {
		return nil, fmt.Errorf("attach share to %s: %w", name, err)
	}
	return doc, nil
}

// ChangeLive hot-plugs a device a part makes into the running instance
// name, or out of it, in its live and persistent configuration, then
// stores and republishes the spec the part gives with it; all under the
// instance's lock, and a failure undoes every step. plan gets a copy of
// the stored spec and the running domain's XML, and refuses (an error)
// before anything changed. A detach waits, up to the detach timeout, for
// the guest to release the device, and warns when it has not (libvirt
// completes the detach when it does). op names the change in errors
// ("attach share to"), its first two words in the metrics
// ("attach_share").
func (c *Controller) ChangeLive(ctx context.Context, op, name string, plan func(in *model.Instance, liveXML []byte) (part.LiveDevice, error)) (_ []string, err error) {
	defer c.observe(strings.Join(strings.Fields(op)[:2], "_"), time.Now(), &err)
	defer c.locks.Lock(name)()
	dc, err := c.DeviceTarget(ctx, op, name) // core_devchange.go
	if err != nil {
		return nil, err
	}
	if !dc.Running {
		return nil, fmt.Errorf("%s %s: %w: a live change needs a running domain; the domain is shut off", op, name, ErrState)
	}
	const affect = virt.AffectLive | virt.AffectConfig
	d, err := plan(dc.In.Clone(), dc.XML)
	if err != nil {
		return nil, err
	}
	if err := d.Spec.Validate(); err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	plug, unplug := c.hotplug.AttachDevice, c.hotplug.DetachDevice
	if d.Detach {
		plug, unplug = unplug, plug
	}
	r := revert.New(c.log, op+" "+name+": "+d.What)
	defer r.Fail(&err)
	if err := plug(ctx, name, d.XML, affect); err != nil {
		return nil, fmt.Errorf("%s %s: %s: %w", op, name, d.What, err)
	}
	r.Add("undo "+op+" "+name+": "+d.What, func(ctx context.Context) error { return unplug(ctx, name, d.XML, affect) })
	var warn []string
	if d.Detach && d.Present != nil {
		warn = c.WaitRemoved(ctx, name, affect, d.What, func(*virt.Devices) bool {
			doc, err := c.domains.XML(ctx, name, true)
			return err != nil || d.Present(doc)
		})
	}
	inst, err := c.FinishDeviceChange(ctx, r, dc, d.Spec, warn)
	if err != nil {
		return nil, err
	}
	return inst.Warnings, nil
}
