package ops

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// A device change of an instance's domain, as the hot-plug operations
// (hotplug.go) and the live device changes (liveshares.go) make it:
// begun (the instance found with its domain, the configurations the
// request affects resolved, the running domain's devices read), the
// device plugged through the hypervisor's HotPlug, a detached one waited
// for, finished (the core reads the addresses back, runs the parts'
// Defined phase and publishes).

// DeviceChanges is what a device change needs of the core
// (hostctl/controller, core_devchange.go) besides the Frame: the running
// domain's XML, how long a guest has to release a device detached live,
// the change published; the host side of a device.
type DeviceChanges interface {
	RunningXML(ctx context.Context, name string) ([]byte, error)
	DetachTimeout() time.Duration
	FinishDeviceChange(ctx context.Context, r *revert.Reverter, old, next *model.Instance, expect int64) (*controller.Instance, error)
	DeviceHost(in *model.Instance) (virt.Host, virt.Options)
}

// HotPlug changes the devices of a defined domain: the hypervisor's
// (the core's Hypervisor, *virt.Conn).
type HotPlug interface {
	AttachDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error
	DetachDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error
}

// deviceTarget is this host's instance whose domain a device change is
// about: its stored record and spec, whether its domain runs, and the
// domain's XML as it runs (its inactive XML when it does not).
type deviceTarget struct {
	Rec     store.Instance
	In      *model.Instance
	Running bool
	XML     []byte
}

// findDeviceTarget finds this host's instance name (locked by the
// caller) for a device change op ("attach disk to"): refused when the
// parts refuse it an apply (it is shelved or rescued), on a host without
// a hypervisor, or when it has no domain.
func findDeviceTarget(ctx context.Context, f Frame, dcs DeviceChanges, op, name string) (*deviceTarget, error) {
	rec, in, err := instance(ctx, f, op, part.Apply, name, withHypervisor)
	if err != nil {
		return nil, err
	}
	cur, err := f.CurrentDomain(ctx, name, rec.UUID)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	doc, err := dcs.RunningXML(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	return &deviceTarget{Rec: rec, In: in, Running: cur.Running, XML: doc}, nil
}

// deviceChange is a device change begun: the instance (locked by the
// caller) and its domain, the running domain's devices and the
// configurations the change affects.
type deviceChange struct {
	*deviceTarget
	Live   *virt.Devices
	Affect virt.Affect
}

// beginDeviceChange begins a device change of this host's instance name
// for op ("attach disk to"): refused when it is shelved or rescued, has
// no domain, or a affects a configuration the domain's state does not
// allow.
func beginDeviceChange(ctx context.Context, f Frame, dcs DeviceChanges, op, name string, a types.Affect) (*deviceChange, error) {
	t, err := findDeviceTarget(ctx, f, dcs, op, name)
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
	return &deviceChange{deviceTarget: t, Live: live, Affect: affect}, nil
}

// finishDeviceChange stores and publishes next, t's spec with the
// change, warn first among the warnings; the undo steps go on r.
func finishDeviceChange(ctx context.Context, dcs DeviceChanges, r *revert.Reverter, t *deviceTarget, next *model.Instance, warn []string) (*controller.Instance, error) {
	inst, err := dcs.FinishDeviceChange(ctx, r, t.In, next, t.Rec.Revision)
	if err != nil {
		return nil, err
	}
	inst.Warnings = append(warn, inst.Warnings...)
	return inst, nil
}

// detachPollInterval is how often waitRemoved reads the running domain's
// XML while a guest has not yet released a device detached live.
const detachPollInterval = 100 * time.Millisecond

// waitRemoved waits, after a live detach (affect has AffectLive), until
// the running domain name no longer has the device (present reports
// whether it does, from the domain's devices or its XML). A guest that
// has not released it within the core's detach timeout gets a warning:
// libvirt completes the detach when it does.
func waitRemoved(ctx context.Context, dcs DeviceChanges, log *slog.Logger, name string, affect virt.Affect, what string, present func(devs *virt.Devices, doc []byte) bool) []string {
	if affect&virt.AffectLive == 0 {
		return nil
	}
	timeout := dcs.DetachTimeout()
	deadline := time.Now().Add(timeout)
	for {
		doc, err := dcs.RunningXML(ctx, name)
		if err != nil {
			return []string{fmt.Sprintf("%s: could not check the running domain after the detach: %v", what, err)}
		}
		devs, err := virt.ParseDevices(doc)
		if err == nil && !present(devs, doc) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			log.Warn("live detach still pending: the guest has not released the device", "instance", name, "device", what, "waited", timeout)
			return []string{fmt.Sprintf("%s: the guest has not released it within %s; it is gone from the metadata and the persistent configuration, and leaves the running domain when the guest lets go", what, timeout)}
		}
		select {
		case <-ctx.Done():
		case <-time.After(detachPollInterval):
		}
	}
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
