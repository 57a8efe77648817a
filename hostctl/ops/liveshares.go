package ops

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// Live devices: a device a part makes (part.LiveDevice) hot-plugged into
// a running instance, or out of it, over the device-change machinery of
// devicechange.go. The shares part's live attach and detach
// (hostctl/shares, its LiveCore) go through it; the daemon gives the
// share service a LiveDevices.

// LiveDevices hot-plugs the devices of parts (shares.LiveCore).
type LiveDevices struct {
	base
	devices DeviceChanges
	hotplug HotPlug
}

// NewLiveDevices is the live device changes of the core c.
func NewLiveDevices(c *controller.Controller) *LiveDevices {
	return &LiveDevices{base: base{frame: c, log: c.Logger()}, devices: c, hotplug: c.Hypervisor()}
}

// LiveXML is the running domain's XML of this host's instance name, read
// under its lock (the shares part asks before a live attach changes
// anything); refused as a device change is (not this host's, shelved or
// rescued, no domain).
func (l *LiveDevices) LiveXML(ctx context.Context, name string) ([]byte, error) {
	defer l.frame.LockInstance(name)()
	t, err := findDeviceTarget(ctx, l.frame, l.devices, "attach share to", name)
	if err != nil {
		return nil, err
	}
	return t.XML, nil
}

// ChangeLive hot-plugs a device a part makes into the running instance
// name, or out of it, in its live and persistent configuration, then
// stores and republishes the spec the part gives with it; all under the
// instance's lock, and a failure undoes every step. plan gets a copy of
// the stored spec and the running domain's XML, and refuses (an error)
// before anything changed. A detach waits, up to the core's detach
// timeout, for the guest to release the device, and warns when it has
// not (libvirt completes the detach when it does). op names the change
// in errors ("attach share to"), its first two words in the metrics
// ("attach_share").
func (l *LiveDevices) ChangeLive(ctx context.Context, op, name string, plan func(in *model.Instance, liveXML []byte) (part.LiveDevice, error)) (_ []string, err error) {
	defer l.frame.Observe(strings.Join(strings.Fields(op)[:2], "_"), time.Now(), &err)
	defer l.frame.LockInstance(name)()
	dc, err := findDeviceTarget(ctx, l.frame, l.devices, op, name)
	if err != nil {
		return nil, err
	}
	if !dc.Running {
		return nil, fmt.Errorf("%s %s: %w: a live change needs a running domain; the domain is shut off", op, name, controller.ErrState)
	}
	const affect = virt.AffectLive | virt.AffectConfig
	d, err := plan(dc.In.Clone(), dc.XML)
	if err != nil {
		return nil, err
	}
	if err := d.Spec.Validate(); err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	plug, unplug := l.hotplug.AttachDevice, l.hotplug.DetachDevice
	if d.Detach {
		plug, unplug = unplug, plug
	}
	r := revert.New(l.log, op+" "+name+": "+d.What)
	defer r.Fail(&err)
	if err := plug(ctx, name, d.XML, affect); err != nil {
		return nil, fmt.Errorf("%s %s: %s: %w", op, name, d.What, err)
	}
	r.Add("undo "+op+" "+name+": "+d.What, func(ctx context.Context) error { return unplug(ctx, name, d.XML, affect) })
	var warn []string
	if d.Detach && d.Present != nil {
		warn = waitRemoved(ctx, l.devices, l.log, name, affect, d.What, func(_ *virt.Devices, doc []byte) bool { return d.Present(doc) })
	}
	inst, err := finishDeviceChange(ctx, l.devices, r, dc, d.Spec, warn)
	if err != nil {
		return nil, err
	}
	return inst.Warnings, nil
}
