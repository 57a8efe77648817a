package controller

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// The core as the shares part (hostctl/shares) calls it: its
// shares.Instances, shares.LiveInstances and shares.SupportChecker. They
// name no type of this package, so that hostctl/shares does not import
// it.

// DomainState is the instance's state as Get gives it ("" without a
// hypervisor).
func (c *Controller) DomainState(ctx context.Context, name string) (string, error) {
	inst, err := c.Get(ctx, name)
	if err != nil {
		return "", err
	}
	return inst.State, nil
}

// Reapply is ApplyInstance for the share service (an attach or detach
// redefines the instance with its mapped shares); it returns the apply's
// warnings.
func (c *Controller) Reapply(ctx context.Context, in *model.Instance) ([]string, error) {
	inst, err := c.ApplyInstance(ctx, in)
	if err != nil {
		return nil, err
	}
	return inst.Warnings, nil
}

// Hypervisor reports whether instances have domains here (false with
// --virt none).
func (c *Controller) Hypervisor() bool {
	_, ok := c.drv.(libvirtDriver)
	return ok
}

// shareSupporter is a hypervisor that tells what it can do for virtiofs
// shares (virt.Conn).
type shareSupporter interface {
	ShareSupport(ctx context.Context, typ virt.DomainType, machine string) (virt.ShareSupport, error)
}

// CheckShareSupport refuses, with ErrState, shares on a host whose
// libvirt offers no virtiofs driver or cannot share guest memory (Nova's
// COMPUTE_STORAGE_VIRTIO_FS and COMPUTE_MEM_BACKING_FILE traits): an
// instance whose memory cannot be shared cannot have a share. Without a
// hypervisor, or one that cannot tell, there is nothing to check.
func (c *Controller) CheckShareSupport(ctx context.Context) error {
	if c.shareCaps == nil || c.shareOK.Load() {
		return nil
	}
	sup, err := c.shareCaps.ShareSupport(ctx, c.dom.Type, c.dom.Machine)
	if err != nil {
		return err
	}
	if err := sup.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	c.shareOK.Store(true)
	return nil
}

// sharedMemoryRE finds shared guest memory in a domain's XML (libvirt
// writes <access mode='shared'/> inside <memoryBacking>).
var sharedMemoryRE = regexp.MustCompile(`(?s)<memoryBacking>.*<access mode=['"]shared['"]/>.*</memoryBacking>`)

// AttachShareLive hot-plugs a virtiofs share into a running instance
// (live and persistent configuration; libvirt 9.0 starts its virtiofsd)
// and republishes the metadata. The running domain must already have
// shared memory (it booted with a share, or with --shared-memory):
// virtiofs cannot be given shared memory afterwards, and such an
// instance is refused with ErrState. The share service calls it for
// `hostctl share attach --live`; the specification itself only attaches
// to SHUTOFF instances.
func (c *Controller) AttachShareLive(ctx context.Context, name string, s model.Share) (_ []string, err error) {
	defer c.observe("attach_share", time.Now(), &err)
	defer c.locks.Lock(name)()
	dc, err := c.beginDeviceChange(ctx, "attach share to", name, types.Affect{Live: true, Config: true})
	if err != nil {
		return nil, err
	}
	if err := c.checkSharedMemory(ctx, name); err != nil {
		return nil, err
	}
	if _, used := dc.live.Share(s.EffectiveTag()); used {
		return nil, fieldError("share.tag", s.EffectiveTag(), "is already the tag of a virtiofs share of the domain")
	}
	next := clone(dc.in)
	next.Shares = append(slices.DeleteFunc(next.Shares, func(x model.Share) bool { return x.ShareID == s.ShareID }), s)
	if err := next.Validate(); err != nil {
		return nil, fmt.Errorf("attach share to %s: %w", name, err)
	}
	dirs, err := c.shareRoot.Dirs([]model.Share{s})
	if err != nil {
		return nil, fmt.Errorf("attach share to %s: %w", name, err)
	}
	host := c.host(next)
	host.ShareDirs = dirs
	devXML, err := virt.ShareDeviceXML(s, host)
	if err != nil {
		return nil, fmt.Errorf("attach share to %s: %w", name, err)
	}
	r := revert.New(c.log, "attach share "+s.EffectiveTag()+" to "+name)
	defer r.Fail(&err)
	if err := c.hotplug.AttachDevice(ctx, name, devXML, dc.affect); err != nil {
		return nil, fmt.Errorf("attach share %s to %s: %w", s.EffectiveTag(), name, err)
	}
	r.Add("detach share "+s.EffectiveTag(), func(ctx context.Context) error {
		return c.hotplug.DetachDevice(ctx, name, devXML, dc.affect)
	})
	return warningsOf(c.finishDeviceChange(ctx, r, dc, next, nil))
}

// CheckShareLive tells whether a share can be hot-plugged into the
// running instance now: it runs, and its memory is shared. The share
// service asks before it changes anything.
func (c *Controller) CheckShareLive(ctx context.Context, name string) error {
	if _, err := c.ownRecord(ctx, "attach share to", name); err != nil {
		return err
	}
	if err := c.drv.require("attach share to", name); err != nil {
		return err
	}
	return c.checkSharedMemory(ctx, name)
}

func (c *Controller) checkSharedMemory(ctx context.Context, name string) error {
	doc, err := c.domains.XML(ctx, name, true)
	if err != nil {
		return fmt.Errorf("attach share to %s: %w", name, err)
	}
	if !sharedMemoryRE.Match(doc) {
		return fmt.Errorf("attach share to %s: %w: the running domain's memory is not shared (it booted without shares), and virtiofs needs shared memory from boot: stop the instance and attach the share cold", name, ErrState)
	}
	return nil
}

// DetachShareLive hot-unplugs the share with share ID id from a running
// instance and republishes the metadata. The guest must release the
// device; if it has not within the detach timeout, the answer carries a
// warning (libvirt completes the detach when it does).
func (c *Controller) DetachShareLive(ctx context.Context, name, id string) (_ []string, err error) {
	defer c.observe("detach_share", time.Now(), &err)
	defer c.locks.Lock(name)()
	dc, err := c.beginDeviceChange(ctx, "detach share from", name, types.Affect{Live: true, Config: true})
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(dc.in.Shares, func(x model.Share) bool { return x.ShareID == id })
	if i < 0 {
		return nil, fmt.Errorf("detach share from %s: %w: the instance has no share %s", name, store.ErrNotFound, id)
	}
	s := dc.in.Shares[i]
	host := c.host(dc.in)
	host.ShareDirs = map[string]string{s.ShareID: s.Source}
	devXML, err := virt.ShareDeviceXML(s, host)
	if err != nil {
		return nil, fmt.Errorf("detach share from %s: %w", name, err)
	}
	next := clone(dc.in)
	next.Shares = slices.Delete(next.Shares, i, i+1)
	r := revert.New(c.log, "detach share "+s.EffectiveTag()+" from "+name)
	defer r.Fail(&err)
	if err := c.hotplug.DetachDevice(ctx, name, devXML, dc.affect); err != nil {
		return nil, fmt.Errorf("detach share %s from %s: %w", s.EffectiveTag(), name, err)
	}
	r.Add("attach share "+s.EffectiveTag()+" again", func(ctx context.Context) error {
		return c.hotplug.AttachDevice(ctx, name, devXML, dc.affect)
	})
	warn := c.waitRemoved(ctx, name, dc.affect, "share "+s.EffectiveTag(), func(d *virt.Devices) bool {
		_, ok := d.Share(s.EffectiveTag())
		return ok
	})
	return warningsOf(c.finishDeviceChange(ctx, r, dc, next, warn))
}

// warningsOf is the warnings of a device change's answer.
func warningsOf(inst *Instance, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	return inst.Warnings, nil
}
