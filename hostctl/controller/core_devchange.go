package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/view"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// What a device change of an instance's domain needs of the core: the
// device hot-plug operations of hostctl/ops (devicechange.go, hotplug.go)
// and the live device changes of the shares part (hostctl/ops,
// liveshares.go). The core finds
// the instance and its domain (DeviceTarget), owns the hypervisor's
// hot-plug and the wait for a guest to release a device, and stores and
// publishes the changed spec (FinishDeviceChange); which configurations
// a change affects and the devices themselves are the operations'.

// HotPlug changes the devices of a defined domain.
type HotPlug interface {
	AttachDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error
	DetachDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error
	// UpdateDevice changes a device in place; the config-drive media
	// part swaps the cdrom's medium with it (virt.ConfigDriveMediaXML,
	// live and forced; hostctl/parts/configdrive).
	UpdateDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error
}

// HotPlug is the core's hypervisor's device hot-plug.
func (c *Controller) HotPlug() HotPlug { return c.hotplug }

// DeviceTarget is this host's instance whose domain a device change is
// about: its stored record and spec, whether its domain runs, and the
// domain's XML as it runs (its inactive XML when it does not).
type DeviceTarget struct {
	Rec     store.Instance
	In      *model.Instance
	Running bool
	XML     []byte
}

// DeviceTarget finds this host's instance name (locked by the caller)
// for a device change op ("attach disk to"): refused when it is shelved
// or rescued or has no domain.
func (c *Controller) DeviceTarget(ctx context.Context, op, name string) (*DeviceTarget, error) {
	// Ownership first, as in powerTarget.
	rec, err := c.ownRecord(ctx, op, name)
	if err != nil {
		return nil, err
	}
	if err := c.drv.require(op, name); err != nil {
		return nil, err
	}
	in, err := decodeSpec(rec)
	if err != nil {
		return nil, err
	}
	if err := c.checkParts(ctx, part.Apply, in); err != nil { // parts.go: the parts see a device change as an apply (a shelved or rescued instance is refused)
		return nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	cur, err := c.requireDomain(ctx, name, rec.UUID)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	doc, err := c.domains.XML(ctx, name, true)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	return &DeviceTarget{Rec: rec, In: in, Running: cur.running, XML: doc}, nil
}

// FinishDeviceChange reads the addresses back into next (t's spec with
// the change), brings the parts (the DHCP leases) in line and publishes
// next, warn first among the warnings; the undo steps go on r.
func (c *Controller) FinishDeviceChange(ctx context.Context, r *revert.Reverter, t *DeviceTarget, next *model.Instance, warn []string) (*Instance, error) {
	if _, err := c.readBack(ctx, next); err != nil {
		return nil, err
	}
	if err := c.definedParts(ctx, part.Apply, r, t.In, next); err != nil { // core_nicspart.go
		return nil, err
	}
	inst, err := c.publish(ctx, r, next, t.Rec.Revision)
	if err != nil {
		return nil, err
	}
	inst.State = c.domainState(ctx, next.Name, next.UUID)
	inst.Warnings = append(warn, inst.Warnings...)
	return inst, nil
}

// detachPollInterval is how often WaitRemoved reads the running domain's
// XML while a guest has not yet released a device detached live.
const detachPollInterval = 100 * time.Millisecond

// WaitRemoved waits, after a live detach (affect has AffectLive), until
// the running domain no longer has the device (present reports whether
// it does). A guest that has not released it within the detach timeout
// gets a warning: libvirt completes the detach when it does.
func (c *Controller) WaitRemoved(ctx context.Context, name string, affect virt.Affect, what string, present func(*virt.Devices) bool) []string {
	if affect&virt.AffectLive == 0 {
		return nil
	}
	deadline := time.Now().Add(c.detachTimeout)
	for {
		doc, err := c.domains.XML(ctx, name, true)
		if err != nil {
			return []string{fmt.Sprintf("%s: could not check the running domain after the detach: %v", what, err)}
		}
		devs, err := virt.ParseDevices(doc)
		if err == nil && !present(devs) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.log.Warn("live detach still pending: the guest has not released the device", "instance", name, "device", what, "waited", c.detachTimeout)
			return []string{fmt.Sprintf("%s: the guest has not released it within %s; it is gone from the metadata and the persistent configuration, and leaves the running domain when the guest lets go", what, c.detachTimeout)}
		}
		select {
		case <-ctx.Done():
		case <-time.After(detachPollInterval):
		}
	}
}

// DeviceHost is the host side of in's devices (without the encrypted
// disks' sources: Domains.DomainHost) and the options domains are built
// with.
func (c *Controller) DeviceHost(in *model.Instance) (virt.Host, virt.Options) {
	return c.host(in), c.dom
}

// MakeInstanceDir makes the directory of instance name's files; the undo
// step on r removes what it made.
func (c *Controller) MakeInstanceDir(r *revert.Reverter, name string) error {
	return c.mkdirInstance(r, c.instanceDir(name))
}

// The power of an instance's domain as a reboot (hostctl/ops, reboot.go)
// changes it, and the parts it meets: a plain start and a soft reboot
// are refused by the parts' Check (an instance in ERROR:
// hostctl/parts/faults), a hard reboot clears the fault.

// Parts are the registered parts, in registration order (an operation
// of hostctl/ops finds among them those it works with).
func (c *Controller) Parts() []part.Part { return c.parts }

// PreStart runs the parts' work before the lock of a start for op.
func (c *Controller) PreStart(ctx context.Context, op part.Op, name string) error {
	return c.preStartParts(ctx, op, name) // core_nicspart.go
}

// PowerTarget is this host's instance name (locked by the caller) for
// op, checked by the parts for pop; running tells whether its domain
// runs.
func (c *Controller) PowerTarget(ctx context.Context, op string, pop part.Op, name string) (store.Instance, bool, error) {
	rec, cur, err := c.powerTarget(ctx, op, pop, name)
	if err != nil {
		return store.Instance{}, false, err
	}
	return rec, cur.running, nil
}

// PowerOff powers the running domain of rec off and leaves it as a stop
// does: the parts told, the passphrases out of libvirt (a
// failure there is logged: the reconciler retries; the start after
// defines them again).
func (c *Controller) PowerOff(ctx context.Context, rec store.Instance) error {
	if err := c.domains.Destroy(ctx, rec.Name); err != nil {
		return err
	}
	c.afterRecordParts(ctx, "stop", rec) // parts.go
	if err := c.disks.UndefineSecrets(ctx, rec.UUID); err != nil {
		c.log.Warn("libvirt secrets not removed after power-off; the reconciler retries", "name", rec.Name, "err", err)
	}
	return nil
}

// StartDomain starts the domain of rec, not running, as Start does (a
// share that cannot be mounted puts the instance in ERROR).
func (c *Controller) StartDomain(ctx context.Context, rec store.Instance) error {
	return c.startDomain(ctx, rec)
}

// RebootDomain reboots the running domain name in place (libvirt's
// reboot); ok is false when the hypervisor cannot.
func (c *Controller) RebootDomain(ctx context.Context, name string) (ok bool, err error) {
	r, ok := c.domains.(interface {
		Reboot(ctx context.Context, name string) error
	})
	if !ok {
		return false, nil
	}
	return true, r.Reboot(ctx, name)
}

// An instance is in ERROR when a start failed because a share it needs
// could not be mounted on the host; the part that keeps the faults
// (hostctl/parts/faults) records it (startFailer) and the core shows it
// (faultShower): Instance.State is StateError while the domain is not
// running, Instance.Fault says why.

// ErrMountFailed is wrapped by the error of a part's BeforeStart when a
// share could not be mounted (a *MountError): the start that hit it puts
// the instance in ERROR.
var ErrMountFailed = part.ErrMountFailed

// MountError is the error of a part's BeforeStart when a share could not
// be mounted on the host (hostctl/part).
type MountError = part.MountError

// StateError is the state of an instance in ERROR (Instance.State)
// while its domain is not running (view.WithFault).
const StateError = view.Error

// startFailer is a part with work when a start failed (the faults part:
// a mount failure puts the instance in ERROR); its error joins the
// start's.
type startFailer interface {
	StartFailed(ctx context.Context, in *part.Instance, err error) error
}

// faultShower is a part that knows the instances in ERROR: the reason by
// instance UUID (list reads every one: view.Faults).
type faultShower interface {
	Fault(ctx context.Context, uuid string) (string, error)
}

// startFailed tells the parts that the start of rec failed with err and
// returns err, joined by what they could not do.
func (c *Controller) startFailed(ctx context.Context, rec store.Instance, err error) error {
	var in *part.Instance
	errs := []error{err}
	for _, p := range c.parts {
		sf, ok := p.(startFailer)
		if !ok {
			continue
		}
		if in == nil {
			spec, derr := decodeSpec(rec)
			if derr != nil {
				return errors.Join(err, derr)
			}
			in = &part.Instance{Spec: spec, Host: rec.Host}
		}
		if ferr := sf.StartFailed(ctx, in, err); ferr != nil {
			errs = append(errs, ferr)
		}
	}
	if len(errs) == 1 {
		return err
	}
	return errors.Join(errs...)
}

// faultOf returns the reason an instance is in ERROR ("" when it is not).
func (c *Controller) faultOf(ctx context.Context, uuid string) (string, error) {
	for _, p := range c.parts {
		if fs, ok := p.(faultShower); ok {
			return fs.Fault(ctx, uuid)
		}
	}
	return "", nil
}
