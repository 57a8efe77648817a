package ops

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// A device change of an instance's domain, as the hot-plug operations
// (hotplug.go) make it: begun (the instance found with its domain, the
// configurations the request affects resolved, the running domain's
// devices read), the device plugged through the core's HotPlug, a
// detached one waited for, finished (the core reads the addresses back,
// runs the parts' Defined phase and publishes).

// DeviceChanges is what a device change needs of the core
// (hostctl/controller, core_devchange.go): the instance and its domain,
// the hypervisor's hot-plug, the wait for a guest to release a device
// detached live, the change published; the host side of a device.
type DeviceChanges interface {
	DeviceTarget(ctx context.Context, op, name string) (*controller.DeviceTarget, error)
	HotPlug() controller.HotPlug
	WaitRemoved(ctx context.Context, name string, affect virt.Affect, what string, present func(*virt.Devices) bool) []string
	FinishDeviceChange(ctx context.Context, r *revert.Reverter, t *controller.DeviceTarget, next *model.Instance, warn []string) (*controller.Instance, error)
	DeviceHost(in *model.Instance) (virt.Host, virt.Options)
}

// deviceChange is a device change begun: the instance (locked by the
// caller) and its domain, the running domain's devices and the
// configurations the change affects.
type deviceChange struct {
	*controller.DeviceTarget
	Live   *virt.Devices
	Affect virt.Affect
}

// beginDeviceChange begins a device change of this host's instance name
// for op ("attach disk to"): refused when it is shelved or rescued, has
// no domain, or a affects a configuration the domain's state does not
// allow.
func beginDeviceChange(ctx context.Context, dcs DeviceChanges, op, name string, a types.Affect) (*deviceChange, error) {
	t, err := dcs.DeviceTarget(ctx, op, name)
	if err != nil {
		return nil, err
	}
	affect, err := resolveAffect(a, t.Running)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	live, err := virt.ParseDevices(t.XML)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	return &deviceChange{DeviceTarget: t, Live: live, Affect: affect}, nil
}

// resolveAffect turns the request's choice into libvirt's flags for a
// domain that runs or not.
func resolveAffect(a types.Affect, running bool) (virt.Affect, error) {
	switch {
	case !a.Live && !a.Config:
		if running {
			return virt.AffectLive | virt.AffectConfig, nil
		}
		return virt.AffectConfig, nil
	case a.Live && !running:
		return 0, fmt.Errorf("%w: --live needs a running domain; the domain is shut off (use --config, or no flag)", controller.ErrState)
	case a.Config && !a.Live && running:
		return 0, fmt.Errorf("%w: --config alone on a running domain: the metadata follows the running configuration, which would not have the change until the guest restarts (add --live, or stop the instance first)", controller.ErrState)
	}
	var out virt.Affect
	if a.Live {
		out |= virt.AffectLive
	}
	if a.Config {
		out |= virt.AffectConfig
	}
	return out, nil
}
