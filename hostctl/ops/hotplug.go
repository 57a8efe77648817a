package ops

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// Device hot-plug: disks and NICs attached to and detached from an
// instance's domain, live, in its persistent configuration or both
// (types.Affect), the metadata and config drive republished after.

// Volumes is the disks part (hostctl/parts/disks) as an attach and a
// detach use it: the disks an attach makes (planned and checked against
// the encryption they need before anything is made), their passphrases
// handed to libvirt, the secrets and records of the disks a detach
// forgets.
type Volumes interface {
	Make(ctx context.Context, in *model.Instance) (create func(context.Context, *revert.Reverter) (committed func(context.Context), err error), err error)
	DefineSecrets(ctx context.Context, r *revert.Reverter, in *model.Instance) error
	Forget(ctx context.Context, in *model.Instance, disks []string)
}

// hotplugger attaches and detaches disks and NICs.
type hotplugger struct {
	base
	devices DeviceChanges
	hotplug HotPlug
	files   Files
	volumes Volumes
	layouts Layouts // EncryptAttached
	domains Domains // DomainHost: an encrypted disk's source
	macs    []MACClaims
}

// AttachDisk creates a blank disk (qemu-img, in the instance directory)
// and attaches it. The tag, target, bus, serial and size are checked
// before anything is touched; afterwards the addresses are read back and
// the metadata and config drive republished. A failure undoes every step.
func (o *hotplugger) AttachDisk(ctx context.Context, name string, req types.DiskRequest) (_ *controller.Instance, err error) {
	defer o.frame.Observe("attach_disk", time.Now(), &err)
	defer o.frame.LockInstance(name)()
	dc, err := beginDeviceChange(ctx, o.frame, o.devices, "attach disk to", name, req.Affect)
	if err != nil {
		return nil, err
	}
	_, opts := o.devices.DeviceHost(dc.In)
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
	if err := virt.CheckDiskBus(machine(opts), disk.Bus); err != nil {
		return nil, fieldError("bus", disk.Bus, "%v", err)
	}
	if err := model.CheckDiskSize(disk.Size); err != nil {
		return nil, fieldError("size", disk.Size, "%v", err)
	}
	if disk.Name == "" {
		if disk.Name = dc.Live.FreeTarget(disk.Bus); disk.Name == "" {
			return nil, fieldError("target", nil, "the domain has no free target name left on bus %s", disk.Bus)
		}
	} else if x, used := dc.Live.Disk(disk.Name); used {
		what := "a disk"
		if x.Alias == virt.ConfigDriveAlias {
			what = "the config drive"
		}
		return nil, fieldError("target", disk.Name, "is already used by %s of the domain", what)
	}
	if err := o.layouts.EncryptAttached(ctx, dc.In, &disk); err != nil {
		return nil, fmt.Errorf("attach disk to %s: %w", name, err)
	}
	next := dc.In.Clone()
	next.Disks = append(next.Disks, disk)
	if err := next.Validate(); err != nil {
		return nil, fmt.Errorf("attach disk to %s: %w", name, err)
	}
	host, _ := o.devices.DeviceHost(next)
	devXML, err := virt.DiskDeviceXML(disk, host, opts)
	if err != nil {
		return nil, fmt.Errorf("attach disk to %s: %w", name, err)
	}
	// The disk alone, planned and checked against the encryption it needs.
	create, err := o.volumes.Make(ctx, &model.Instance{Name: name, UUID: dc.In.UUID, Disks: []model.Disk{disk}})
	if err != nil {
		return nil, fmt.Errorf("attach disk to %s: %w", name, err)
	}

	r := revert.New(o.log, "attach disk "+disk.Name+" to "+name)
	defer r.Fail(&err)
	if err := o.files.MakeInstanceDir(r, name); err != nil {
		return nil, err
	}
	if _, err := create(ctx, r); err != nil {
		return nil, fmt.Errorf("attach disk to %s: %w", name, err)
	}
	if disk.Encrypted {
		// The device names its libvirt secret; a running QEMU opens the
		// disk as it is attached, so libvirt needs the passphrase now.
		host, opts, err = o.domains.DomainHost(ctx, next)
		if err != nil {
			return nil, fmt.Errorf("attach disk to %s: %w", name, err)
		}
		if devXML, err = virt.DiskDeviceXML(disk, host, opts); err != nil {
			return nil, fmt.Errorf("attach disk to %s: %w", name, err)
		}
		if dc.Running {
			if err := o.volumes.DefineSecrets(ctx, r, &model.Instance{UUID: dc.In.UUID, Disks: []model.Disk{disk}}); err != nil {
				return nil, fmt.Errorf("attach disk to %s: %w", name, err)
			}
		}
	}
	if err := o.hotplug.AttachDevice(ctx, name, devXML, dc.Affect); err != nil {
		return nil, fmt.Errorf("attach disk %s to %s: %w", disk.Name, name, err)
	}
	r.Add("detach disk "+disk.Name, func(ctx context.Context) error {
		return o.hotplug.DetachDevice(ctx, name, devXML, dc.Affect)
	})
	return finishDeviceChange(ctx, o.devices, r, dc.deviceTarget, next, nil)
}

// DetachDisk detaches a disk (by tag or target) and deletes its image
// once the persistent configuration no longer has it. A live detach of a
// virtio disk needs the guest to release it; if it has not within the
// detach timeout the change is published anyway, with a warning.
func (o *hotplugger) DetachDisk(ctx context.Context, name string, req types.DetachRequest) (_ *controller.Instance, err error) {
	defer o.frame.Observe("detach_disk", time.Now(), &err)
	defer o.frame.LockInstance(name)()
	if (req.Tag == "") == (req.Target == "") || req.MAC != "" {
		return nil, fieldError("tag", nil, "name the disk to detach by exactly one of tag or target")
	}
	dc, err := beginDeviceChange(ctx, o.frame, o.devices, "detach disk from", name, req.Affect)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(dc.In.Disks, func(d model.Disk) bool {
		return (req.Tag != "" && d.Tag == req.Tag) || (req.Target != "" && d.Name == req.Target)
	})
	if i < 0 {
		return nil, fmt.Errorf("detach disk from %s: %w: the instance has no disk %s", name, store.ErrNotFound, describe(req))
	}
	disk := dc.In.Disks[i]
	if disk.Kind != "" {
		// A flavor's disk is the instance's, as on Nova: not a volume.
		return nil, fmt.Errorf("detach disk from %s: %w: disk %s is the flavor's %s disk, not a volume (resize the instance to another flavor)", name, controller.ErrState, disk.Name, disk.Kind)
	}
	host, opts := o.devices.DeviceHost(dc.In)
	devXML, err := virt.DiskDeviceXML(disk, host, opts)
	if err != nil {
		return nil, fmt.Errorf("detach disk from %s: %w", name, err)
	}
	next := dc.In.Clone()
	next.Disks = slices.Delete(next.Disks, i, i+1)

	r := revert.New(o.log, "detach disk "+disk.Name+" from "+name)
	defer r.Fail(&err)
	if err := o.hotplug.DetachDevice(ctx, name, devXML, dc.Affect); err != nil {
		return nil, fmt.Errorf("detach disk %s from %s: %w", disk.Name, name, err)
	}
	r.Add("attach disk "+disk.Name+" again", func(ctx context.Context) error {
		return o.hotplug.AttachDevice(ctx, name, devXML, dc.Affect)
	})
	warn := waitRemoved(ctx, o.devices, o.log, name, dc.Affect, "disk "+disk.Name, func(d *virt.Devices, _ []byte) bool {
		_, ok := d.Disk(disk.Name)
		return ok
	})
	inst, err := finishDeviceChange(ctx, o.devices, r, dc.deviceTarget, next, warn)
	if err != nil {
		return nil, err
	}
	if dc.Affect&virt.AffectConfig != 0 {
		// The image file goes, and the disk's secret and record with it.
		p := diskFile(o.files, dc.In, disk)
		if rerr := removeFile(p); rerr != nil {
			o.log.Warn("could not remove the image of a removed disk", "file", p, "err", rerr)
		}
		o.volumes.Forget(ctx, dc.In, []string{disk.Name})
	}
	return inst, nil
}

// AttachNIC attaches a NIC (virtio, on a libvirt network) and gives it a
// fixed DHCP lease when the instance's addresses have one for it.
func (o *hotplugger) AttachNIC(ctx context.Context, name string, req types.NICRequest) (_ *controller.Instance, err error) {
	defer o.frame.Observe("attach_nic", time.Now(), &err)
	defer o.frame.LockInstance(name)()
	dc, err := beginDeviceChange(ctx, o.frame, o.devices, "attach NIC to", name, req.Affect)
	if err != nil {
		return nil, err
	}
	mac := strings.ToLower(req.MAC)
	if mac == "" {
		if mac, err = virt.GenerateMAC(); err != nil {
			return nil, err
		}
	}
	if _, used := dc.Live.NIC(mac); used {
		return nil, fieldError("mac", mac, "is already the MAC of a NIC of the domain")
	}
	nic := model.NIC{MAC: mac, Bus: "pci", Tag: req.Tag, Network: req.Network}
	next := dc.In.Clone()
	next.NICs = append(next.NICs, nic)
	if err := next.Validate(); err != nil {
		return nil, fmt.Errorf("attach NIC to %s: %w", name, err)
	}
	// Another instance's NIC may have the MAC (an apply claims the same).
	end, err := o.claimMACs(ctx, "attach NIC to", next, dc.In) // macs.go
	if err != nil {
		return nil, err
	}
	defer func() { end(ctx, err) }()
	host, opts := o.devices.DeviceHost(next)
	devXML, err := virt.NICDeviceXML(nic, len(dc.In.NICs), host, opts)
	if err != nil {
		return nil, fmt.Errorf("attach NIC to %s: %w", name, err)
	}

	r := revert.New(o.log, "attach NIC "+mac+" to "+name)
	defer r.Fail(&err)
	if err := o.hotplug.AttachDevice(ctx, name, devXML, dc.Affect); err != nil {
		return nil, fmt.Errorf("attach NIC %s to %s: %w", mac, name, err)
	}
	r.Add("detach NIC "+mac, func(ctx context.Context) error {
		return o.hotplug.DetachDevice(ctx, name, devXML, dc.Affect)
	})
	return finishDeviceChange(ctx, o.devices, r, dc.deviceTarget, next, nil)
}

// DetachNIC detaches a NIC (by tag or MAC) and removes its DHCP lease.
func (o *hotplugger) DetachNIC(ctx context.Context, name string, req types.DetachRequest) (_ *controller.Instance, err error) {
	defer o.frame.Observe("detach_nic", time.Now(), &err)
	defer o.frame.LockInstance(name)()
	if (req.Tag == "") == (req.MAC == "") || req.Target != "" {
		return nil, fieldError("tag", nil, "name the NIC to detach by exactly one of tag or mac")
	}
	dc, err := beginDeviceChange(ctx, o.frame, o.devices, "detach NIC from", name, req.Affect)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(dc.In.NICs, func(n model.NIC) bool {
		return (req.Tag != "" && n.Tag == req.Tag) || (req.MAC != "" && n.MAC == strings.ToLower(req.MAC))
	})
	if i < 0 {
		return nil, fmt.Errorf("detach NIC from %s: %w: the instance has no NIC %s", name, store.ErrNotFound, describe(req))
	}
	nic := dc.In.NICs[i]
	host, opts := o.devices.DeviceHost(dc.In)
	devXML, err := virt.NICDeviceXML(nic, i, host, opts)
	if err != nil {
		return nil, fmt.Errorf("detach NIC from %s: %w", name, err)
	}
	next := dc.In.Clone()
	next.NICs = slices.Delete(next.NICs, i, i+1)
	end, err := o.claimMACs(ctx, "detach NIC from", next, dc.In) // macs.go: the NIC's MAC is released once it is gone
	if err != nil {
		return nil, err
	}
	defer func() { end(ctx, err) }()

	r := revert.New(o.log, "detach NIC "+nic.MAC+" from "+name)
	defer r.Fail(&err)
	if err := o.hotplug.DetachDevice(ctx, name, devXML, dc.Affect); err != nil {
		return nil, fmt.Errorf("detach NIC %s from %s: %w", nic.MAC, name, err)
	}
	r.Add("attach NIC "+nic.MAC+" again", func(ctx context.Context) error {
		return o.hotplug.AttachDevice(ctx, name, devXML, dc.Affect)
	})
	warn := waitRemoved(ctx, o.devices, o.log, name, dc.Affect, "NIC "+nic.MAC, func(d *virt.Devices, _ []byte) bool {
		_, ok := d.NIC(nic.MAC)
		return ok
	})
	return finishDeviceChange(ctx, o.devices, r, dc.deviceTarget, next, warn)
}

// machine is the machine type domains are built with.
func machine(opts virt.Options) string {
	if opts.Machine != "" {
		return opts.Machine
	}
	return virt.MachineQ35
}

// fieldError is a request's field refused: its value and the rule.
func fieldError(field string, value any, format string, args ...any) error {
	return &model.SpecError{Errors: []model.FieldError{{Field: field, Value: value, Rule: fmt.Sprintf(format, args...)}}}
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
