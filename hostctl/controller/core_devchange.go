package controller

import (
	"context"
	"time"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// What the device changes of hostctl/ops (devicechange.go, hotplug.go,
// liveshares.go) and its reboot (reboot.go) need of the core beyond
// core_ops.go: the hypervisor they hot-plug devices into and reboot
// domains with, the changed spec published, the power of a domain.

// HotPlug changes the devices of a defined domain.
type HotPlug interface {
	AttachDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error
	DetachDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error
	// UpdateDevice changes a device in place; the config-drive media
	// part swaps the cdrom's medium with it (virt.ConfigDriveMediaXML,
	// live and forced; hostctl/parts/configdrive).
	UpdateDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error
}

// Hypervisor is the hypervisor the core was given (Options.Hypervisor;
// nil without one).
func (c *Controller) Hypervisor() Hypervisor {
	hv, _ := c.hotplug.(Hypervisor)
	return hv
}

// DetachTimeout bounds the wait for a running guest to release a device
// detached live (Options.DetachTimeout).
func (c *Controller) DetachTimeout() time.Duration { return c.detachTimeout }

// FinishDeviceChange reads the addresses of next (old, the stored spec at
// revision expect, with a device changed) back from its domain, brings
// the parts (the DHCP leases) in line and publishes next; the undo steps
// go on r.
func (c *Controller) FinishDeviceChange(ctx context.Context, r *revert.Reverter, old, next *model.Instance, expect int64) (*Instance, error) {
	if err := c.ReadBack(ctx, next); err != nil {
		return nil, err
	}
	if err := c.parts.Defined(ctx, part.Apply, &part.Instance{Spec: next, Old: old}, r); err != nil {
		return nil, err
	}
	inst, err := c.publish(ctx, r, next, expect)
	if err != nil {
		return nil, err
	}
	inst.State = c.domainState(ctx, next.Name, next.UUID)
	return inst, nil
}

// DeviceHost is the host side of in's devices (without the encrypted
// disks' sources: DomainHost) and the options domains are built with.
func (c *Controller) DeviceHost(in *model.Instance) (virt.Host, virt.Options) {
	return c.host(in), c.dom
}

// MakeInstanceDir makes the directory of instance name's files; the undo
// step on r removes what it made.
func (c *Controller) MakeInstanceDir(r *revert.Reverter, name string) error {
	return c.mkdirInstance(r, c.instanceDir(name))
}

// Parts are the registered parts, in registration order (an operation
// of hostctl/ops finds among them those it works with).
func (c *Controller) Parts() []part.Part { return c.parts }

// PowerOff powers the running domain of rec off and leaves it as a stop
// does: the parts told, the passphrases out of libvirt (a
// failure there is logged: the reconciler retries; the start after
// defines them again).
func (c *Controller) PowerOff(ctx context.Context, rec store.Instance) error {
	if err := c.domains.Destroy(ctx, rec.Name); err != nil {
		return err
	}
	c.afterRecordParts(ctx, "stop", rec) // phases.go
	if err := c.disks.UndefineSecrets(ctx, rec.UUID); err != nil {
		c.log.Warn("libvirt secrets not removed after power-off; the reconciler retries", "name", rec.Name, "err", err)
	}
	return nil
}
