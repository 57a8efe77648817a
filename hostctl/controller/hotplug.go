package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// HotPlug changes the devices of a defined domain.
type HotPlug interface {
	AttachDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error
	DetachDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error
	// UpdateDevice changes a device in place; the controller swaps the
	// config drive cdrom's medium with it (virt.ConfigDriveMediaXML,
	// live and forced; media.go).
	UpdateDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error
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

// AttachDisk creates a blank disk (qemu-img, in the instance directory)
// and attaches it. The tag, target, bus, serial and size are checked
// before anything is touched; afterwards the addresses are read back and
// the metadata and config drive republished. A failure undoes every step.
func (c *Controller) AttachDisk(ctx context.Context, name string, req types.DiskRequest) (_ *Instance, err error) {
	defer c.observe("attach_disk", time.Now(), &err)
	defer c.locks.Lock(name)()
	dc, err := c.beginDeviceChange(ctx, "attach disk to", name, req.Affect)
	if err != nil {
		return nil, err
	}
	disk := model.Disk{Name: req.Target, Bus: req.Bus, Tag: req.Tag, Serial: req.Serial, Size: req.Size}
	if req.Encrypted != nil {
		disk.Encrypted, disk.Unencrypted = *req.Encrypted, !*req.Encrypted
	}
	if disk.Bus == "" {
		disk.Bus = model.DiskBusVirtio
	}
	if disk.Size == "" {
		disk.Size = types.DefaultDiskSize
	}
	if err := virt.CheckDiskBus(c.machine(), disk.Bus); err != nil {
		return nil, fieldError("bus", disk.Bus, "%v", err)
	}
	if err := model.CheckDiskSize(disk.Size); err != nil {
		return nil, fieldError("size", disk.Size, "%v", err)
	}
	if disk.Name == "" {
		if disk.Name = dc.live.FreeTarget(disk.Bus); disk.Name == "" {
			return nil, fieldError("target", nil, "the domain has no free target name left on bus %s", disk.Bus)
		}
	} else if x, used := dc.live.Disk(disk.Name); used {
		what := "a disk"
		if x.Alias == virt.ConfigDriveAlias {
			what = "the config drive"
		}
		return nil, fieldError("target", disk.Name, "is already used by %s of the domain", what)
	}
	if err := c.encryptAttached(ctx, dc.in, &disk); err != nil {
		return nil, fmt.Errorf("attach disk to %s: %w", name, err)
	}
	next := clone(dc.in)
	next.Disks = append(next.Disks, disk)
	if err := next.Validate(); err != nil {
		return nil, fmt.Errorf("attach disk to %s: %w", name, err)
	}
	devXML, err := virt.DiskDeviceXML(disk, c.host(next), c.dom)
	if err != nil {
		return nil, fmt.Errorf("attach disk to %s: %w", name, err)
	}
	plans, err := c.planDisks(ctx, &model.Instance{Name: name, Disks: []model.Disk{disk}})
	if err != nil {
		return nil, fmt.Errorf("attach disk to %s: %w", name, err)
	}
	if err := c.checkEncryption(ctx, &model.Instance{Name: name, UUID: dc.in.UUID, Disks: []model.Disk{disk}}, plans); err != nil {
		return nil, fmt.Errorf("attach disk to %s: %w", name, err)
	}

	r := revert.New(c.log, "attach disk "+disk.Name+" to "+name)
	defer r.Fail(&err)
	if err := c.mkdirInstance(r, c.instanceDir(name)); err != nil {
		return nil, err
	}
	if err := c.createDisks(ctx, r, dc.in, plans); err != nil {
		return nil, fmt.Errorf("attach disk to %s: %w", name, err)
	}
	if disk.Encrypted {
		// The device names its libvirt secret; a running QEMU opens the
		// disk as it is attached, so libvirt needs the passphrase now.
		host := c.host(next)
		if err := c.encryptedSources(ctx, next, &host); err != nil {
			return nil, fmt.Errorf("attach disk to %s: %w", name, err)
		}
		if devXML, err = virt.DiskDeviceXML(disk, host, c.dom); err != nil {
			return nil, fmt.Errorf("attach disk to %s: %w", name, err)
		}
		if dc.cur.running {
			if err := c.defineSecrets(ctx, r, &model.Instance{UUID: dc.in.UUID, Disks: []model.Disk{disk}}); err != nil {
				return nil, fmt.Errorf("attach disk to %s: %w", name, err)
			}
		}
	}
	if err := c.hotplug.AttachDevice(ctx, name, devXML, dc.affect); err != nil {
		return nil, fmt.Errorf("attach disk %s to %s: %w", disk.Name, name, err)
	}
	r.Add("detach disk "+disk.Name, func(ctx context.Context) error {
		return c.hotplug.DetachDevice(ctx, name, devXML, dc.affect)
	})
	return c.finishDeviceChange(ctx, r, dc, next, nil)
}

// DetachDisk detaches a disk (by tag or target) and deletes its image
// once the persistent configuration no longer has it. A live detach of a
// virtio disk needs the guest to release it; if it has not within the
// detach timeout the change is published anyway, with a warning.
func (c *Controller) DetachDisk(ctx context.Context, name string, req types.DetachRequest) (_ *Instance, err error) {
	defer c.observe("detach_disk", time.Now(), &err)
	defer c.locks.Lock(name)()
	if (req.Tag == "") == (req.Target == "") || req.MAC != "" {
		return nil, fieldError("tag", nil, "name the disk to detach by exactly one of tag or target")
	}
	dc, err := c.beginDeviceChange(ctx, "detach disk from", name, req.Affect)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(dc.in.Disks, func(d model.Disk) bool {
		return (req.Tag != "" && d.Tag == req.Tag) || (req.Target != "" && d.Name == req.Target)
	})
	if i < 0 {
		return nil, fmt.Errorf("detach disk from %s: %w: the instance has no disk %s", name, store.ErrNotFound, describe(req))
	}
	disk := dc.in.Disks[i]
	if disk.Kind != "" {
		// A flavor's disk is the instance's, as on Nova: not a volume.
		return nil, fmt.Errorf("detach disk from %s: %w: disk %s is the flavor's %s disk, not a volume (resize the instance to another flavor)", name, ErrState, disk.Name, disk.Kind)
	}
	devXML, err := virt.DiskDeviceXML(disk, c.host(dc.in), c.dom)
	if err != nil {
		return nil, fmt.Errorf("detach disk from %s: %w", name, err)
	}
	next := clone(dc.in)
	next.Disks = slices.Delete(next.Disks, i, i+1)

	r := revert.New(c.log, "detach disk "+disk.Name+" from "+name)
	defer r.Fail(&err)
	if err := c.hotplug.DetachDevice(ctx, name, devXML, dc.affect); err != nil {
		return nil, fmt.Errorf("detach disk %s from %s: %w", disk.Name, name, err)
	}
	r.Add("attach disk "+disk.Name+" again", func(ctx context.Context) error {
		return c.hotplug.AttachDevice(ctx, name, devXML, dc.affect)
	})
	warn := c.waitRemoved(ctx, name, dc.affect, "disk "+disk.Name, func(d *virt.Devices) bool {
		_, ok := d.Disk(disk.Name)
		return ok
	})
	inst, err := c.finishDeviceChange(ctx, r, dc, next, warn)
	if err != nil {
		return nil, err
	}
	if dc.affect&virt.AffectConfig != 0 {
		c.removeDiskFile(name, disk.Name)
		c.forgetDisks(ctx, dc.in, []string{disk.Name})
	}
	return inst, nil
}

// AttachNIC attaches a NIC (virtio, on a libvirt network) and gives it a
// fixed DHCP lease when the instance's addresses have one for it.
func (c *Controller) AttachNIC(ctx context.Context, name string, req types.NICRequest) (_ *Instance, err error) {
	defer c.observe("attach_nic", time.Now(), &err)
	defer c.locks.Lock(name)()
	dc, err := c.beginDeviceChange(ctx, "attach NIC to", name, req.Affect)
	if err != nil {
		return nil, err
	}
	mac := strings.ToLower(req.MAC)
	if mac == "" {
		if mac, err = virt.GenerateMAC(); err != nil {
			return nil, err
		}
	}
	if _, used := dc.live.NIC(mac); used {
		return nil, fieldError("mac", mac, "is already the MAC of a NIC of the domain")
	}
	nic := model.NIC{MAC: mac, Bus: "pci", Tag: req.Tag, Network: req.Network}
	next := clone(dc.in)
	next.NICs = append(next.NICs, nic)
	if err := next.Validate(); err != nil {
		return nil, fmt.Errorf("attach NIC to %s: %w", name, err)
	}
	// Another instance's NIC may have the MAC (an apply checks the same).
	if err := c.checkMACs(ctx, "attach NIC to", next); err != nil {
		return nil, err
	}
	devXML, err := virt.NICDeviceXML(nic, len(dc.in.NICs), c.host(next), c.dom)
	if err != nil {
		return nil, fmt.Errorf("attach NIC to %s: %w", name, err)
	}

	r := revert.New(c.log, "attach NIC "+mac+" to "+name)
	defer r.Fail(&err)
	if err := c.hotplug.AttachDevice(ctx, name, devXML, dc.affect); err != nil {
		return nil, fmt.Errorf("attach NIC %s to %s: %w", mac, name, err)
	}
	r.Add("detach NIC "+mac, func(ctx context.Context) error {
		return c.hotplug.DetachDevice(ctx, name, devXML, dc.affect)
	})
	return c.finishDeviceChange(ctx, r, dc, next, nil)
}

// DetachNIC detaches a NIC (by tag or MAC) and removes its DHCP lease.
func (c *Controller) DetachNIC(ctx context.Context, name string, req types.DetachRequest) (_ *Instance, err error) {
	defer c.observe("detach_nic", time.Now(), &err)
	defer c.locks.Lock(name)()
	if (req.Tag == "") == (req.MAC == "") || req.Target != "" {
		return nil, fieldError("tag", nil, "name the NIC to detach by exactly one of tag or mac")
	}
	dc, err := c.beginDeviceChange(ctx, "detach NIC from", name, req.Affect)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(dc.in.NICs, func(n model.NIC) bool {
		return (req.Tag != "" && n.Tag == req.Tag) || (req.MAC != "" && n.MAC == strings.ToLower(req.MAC))
	})
	if i < 0 {
		return nil, fmt.Errorf("detach NIC from %s: %w: the instance has no NIC %s", name, store.ErrNotFound, describe(req))
	}
	nic := dc.in.NICs[i]
	devXML, err := virt.NICDeviceXML(nic, i, c.host(dc.in), c.dom)
	if err != nil {
		return nil, fmt.Errorf("detach NIC from %s: %w", name, err)
	}
	next := clone(dc.in)
	next.NICs = slices.Delete(next.NICs, i, i+1)

	r := revert.New(c.log, "detach NIC "+nic.MAC+" from "+name)
	defer r.Fail(&err)
	if err := c.hotplug.DetachDevice(ctx, name, devXML, dc.affect); err != nil {
		return nil, fmt.Errorf("detach NIC %s from %s: %w", nic.MAC, name, err)
	}
	r.Add("attach NIC "+nic.MAC+" again", func(ctx context.Context) error {
		return c.hotplug.AttachDevice(ctx, name, devXML, dc.affect)
	})
	warn := c.waitRemoved(ctx, name, dc.affect, "NIC "+nic.MAC, func(d *virt.Devices) bool {
		_, ok := d.NIC(nic.MAC)
		return ok
	})
	return c.finishDeviceChange(ctx, r, dc, next, warn)
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

func (c *Controller) machine() string {
	if c.dom.Machine != "" {
		return c.dom.Machine
	}
	return virt.MachineQ35
}

func describe(req types.DetachRequest) string {
	switch {
	case req.Tag != "":
		return fmt.Sprintf("tagged %q", req.Tag)
	case req.Target != "":
		return "with target " + req.Target
	}
	return "with MAC " + req.MAC
}
