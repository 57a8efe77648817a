package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// What the device hot-plug operations of hostctl/ops (attach and detach
// of disks and NICs) ask of the core: a device change of an instance's
// domain begun and finished (the shares part's ChangeLive,
// core_sharespart.go, makes its changes the same way), the wait for a
// guest to release a device detached live, the host side of a device,
// and the disks an attach makes or a detach forgets.

// HotPlug changes the devices of a defined domain.
type HotPlug interface {
	AttachDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error
	DetachDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error
	// UpdateDevice changes a device in place; the controller swaps the
	// config drive cdrom's medium with it (virt.ConfigDriveMediaXML,
	// live and forced; media.go).
	UpdateDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error
}

// DeviceChange is a device change begun (BeginDeviceChange): the
// instance's stored record and spec, whether its domain runs, the
// running domain's devices and the configurations the change affects.
type DeviceChange struct {
	Rec     store.Instance
	In      *model.Instance
	Running bool
	Live    *virt.Devices
	Affect  virt.Affect
}

// BeginDeviceChange begins a device change of this host's instance name
// (locked by the caller) for op ("attach disk to"): refused when it is
// shelved or rescued, has no domain, or a affects a configuration the
// domain's state does not allow.
func (c *Controller) BeginDeviceChange(ctx context.Context, op, name string, a types.Affect) (*DeviceChange, error) {
	dc, err := c.beginDeviceChange(ctx, op, name, a)
	if err != nil {
		return nil, err
	}
	return &DeviceChange{Rec: dc.rec, In: dc.in, Running: dc.cur.running, Live: dc.live, Affect: dc.affect}, nil
}

// FinishDeviceChange reads the addresses back into next, brings the
// parts (the DHCP leases) in line and publishes next, warn first among
// the warnings; the undo steps go on r.
func (c *Controller) FinishDeviceChange(ctx context.Context, r *revert.Reverter, dc *DeviceChange, next *model.Instance, warn []string) (*Instance, error) {
	return c.finishDeviceChange(ctx, r, &deviceChange{rec: dc.Rec, in: dc.In}, next, warn)
}

// WaitRemoved waits, after a live detach, until the running domain no
// longer has the device; it returns a warning when the guest has not
// released it within the detach timeout.
func (c *Controller) WaitRemoved(ctx context.Context, name string, affect virt.Affect, what string, present func(*virt.Devices) bool) []string {
	return c.waitRemoved(ctx, name, affect, what, present)
}

// HotPlug is the core's hypervisor's device hot-plug.
func (c *Controller) HotPlug() HotPlug { return c.hotplug }

// DeviceHost is the host side of in's devices (without the encrypted
// disks' sources: Domains.DomainHost) and the options domains are built
// with.
func (c *Controller) DeviceHost(in *model.Instance) (virt.Host, virt.Options) {
	return c.host(in), c.dom
}

// CheckMACs refuses (for op) a NIC of in whose MAC address another
// instance already has.
func (c *Controller) CheckMACs(ctx context.Context, op string, in *model.Instance) error {
	return c.checkMACs(ctx, op, in)
}

// EncryptAttached applies in's ephemeral encryption decision to d, a
// disk attached to it.
func (c *Controller) EncryptAttached(ctx context.Context, in *model.Instance, d *model.Disk) error {
	return c.encryptAttached(ctx, in, d)
}

// NewDisks is how the disks of an instance that have no file yet are
// made, checked against the encryption they need (CheckNewDisks).
type NewDisks struct {
	create func(context.Context, *revert.Reverter) (func(context.Context), error)
}

// CheckNewDisks plans the disks of in and refuses, before anything is
// made, the encryption this host cannot honour.
func (c *Controller) CheckNewDisks(ctx context.Context, in *model.Instance) (NewDisks, error) {
	create, err := c.disks.Make(ctx, in)
	if err != nil {
		return NewDisks{}, err
	}
	return NewDisks{create: create}, nil
}

// MakeInstanceDir makes the directory of instance name's files; the undo
// step on r removes what it made.
func (c *Controller) MakeInstanceDir(r *revert.Reverter, name string) error {
	return c.mkdirInstance(r, c.instanceDir(name))
}

// CreateDisks makes the disks nd of instance in (encrypted ones with
// their secrets); the undo steps on r remove them.
func (c *Controller) CreateDisks(ctx context.Context, r *revert.Reverter, in *model.Instance, nd NewDisks) error {
	_, err := nd.create(ctx, r)
	return err
}

// DefineSecrets hands libvirt the passphrases of in's encrypted disks;
// the undo steps on r undefine them.
func (c *Controller) DefineSecrets(ctx context.Context, r *revert.Reverter, in *model.Instance) error {
	return c.disks.DefineSecrets(ctx, r, in)
}

// ForgetDisk deletes the image file of in's disk and its key-manager
// secret and block-device record.
func (c *Controller) ForgetDisk(ctx context.Context, in *model.Instance, disk string) {
	c.removeDiskFile(in.Name, disk)
	c.disks.Forget(ctx, in, []string{disk})
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
		return 0, fmt.Errorf("%w: --live needs a running domain; the domain is shut off (use --config, or no flag)", ErrState)
	case a.Config && !a.Live && running:
		return 0, fmt.Errorf("%w: --config alone on a running domain: the metadata follows the running configuration, which would not have the change until the guest restarts (add --live, or stop the instance first)", ErrState)
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

// deviceChange is the common part of the four device operations: the
// instance (locked), its stored record and its domain.
type deviceChange struct {
	rec    store.Instance
	in     *model.Instance
	cur    *curDomain
	live   *virt.Devices
	affect virt.Affect
}

func (c *Controller) beginDeviceChange(ctx context.Context, op, name string, a types.Affect) (*deviceChange, error) {
	// Ownership first, as in powerTarget.
	rec, err := c.ownRecord(ctx, op, name)
	if err != nil {
		return nil, err
	}
	if err := c.drv.require(op, name); err != nil {
		return nil, err
	}
	if err := c.refuseVMState(ctx, op, rec); err != nil { // vmstate.go
		return nil, err
	}
	in, err := decodeSpec(rec)
	if err != nil {
		return nil, err
	}
	cur, err := c.requireDomain(ctx, name, rec.UUID)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	affect, err := resolveAffect(a, cur.running)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	doc, err := c.domains.XML(ctx, name, true)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	live, err := virt.ParseDevices(doc)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	return &deviceChange{rec: rec, in: in, cur: cur, live: live, affect: affect}, nil
}

// finishDeviceChange reads the addresses back into next, brings the DHCP
// leases in line and publishes next.
func (c *Controller) finishDeviceChange(ctx context.Context, r *revert.Reverter, dc *deviceChange, next *model.Instance, warn []string) (*Instance, error) {
	if _, err := c.readBack(ctx, next); err != nil {
		return nil, err
	}
	if err := c.definedParts(ctx, part.Apply, r, dc.in, next); err != nil { // core_nicspart.go
		return nil, err
	}
	inst, err := c.publish(ctx, r, next, dc.rec.Revision)
	if err != nil {
		return nil, err
	}
	inst.State = c.domainState(ctx, next.Name, next.UUID)
	inst.Warnings = append(warn, inst.Warnings...)
	return inst, nil
}

// detachPollInterval is how often waitRemoved reads the running domain's
// XML while a guest has not yet released a device detached live.
const detachPollInterval = 100 * time.Millisecond

// waitRemoved waits, after a live detach, until the running domain no
// longer has the device (present reports whether it does). A guest that
// has not released it within the detach timeout gets a warning: libvirt
// completes the detach when it does.
func (c *Controller) waitRemoved(ctx context.Context, name string, affect virt.Affect, what string, present func(*virt.Devices) bool) []string {
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
