package virt

// Reading addresses back: libvirt's qemu driver assigns every address at
// define time (and at cold or live attach), so the inactive XML right after
// DomainDefineXML already says where each device sits; the live XML of a
// running domain says the same, plus runtime names (vnetN, aliases of
// devices without a user alias).
//
// How the addresses map to what a Linux guest sees — each point below is
// checked by TestGuestSeesAddresses, which boots Debian's kernel on such a
// domain and compares its sysfs with what ParseDevices read:
//
//   - virtio disks, NICs, virtiofs: PCI functions. libvirt's
//     <address type='pci' domain bus slot function/> is reported as
//     dddd:bb:ss.f. On q35 a device on "bus 0x06" sits behind the
//     pcie-root-port whose controller index is 6; the firmware numbers the
//     buses behind root ports in the order of the ports, which is the order
//     libvirt gives their indices, so the guest sees the very same address
//     (libvirt 0000:06:00.0 = guest .../0000:00:01.5/0000:06:00.0). A
//     device addressed on bus 0x00 is an integrated endpoint either way.
//
//   - SCSI disks: <address type='drive' controller bus target unit/> is
//     reported as controller:bus:target:unit in hex (Nova's form, and the
//     schema's [a-f0-9]+:[a-f0-9]+:[a-f0-9]+:[a-f0-9]+). On a virtio-scsi
//     controller libvirt passes it to QEMU as {"driver":"scsi-hd",
//     "bus":"scsi<controller>.0","channel":<bus>,"scsi-id":<target>,
//     "lun":<unit>}, and Linux's H:C:T:L for the disk is
//     <host>:<bus>:<target>:<unit>. Channel, target and LUN are libvirt's
//     bus, target and unit unchanged; the host number is the guest's own
//     count of SCSI hosts (every AHCI port is one, so the first virtio-scsi
//     controller was host6 on q35) and has no relation to libvirt's
//     controller index. A guest therefore matches a SCSI disk by
//     channel:target:lun under the PCI function of its virtio-scsi
//     controller (DiskInfo.ControllerAddress). libvirt puts disks named by
//     letter on target 0 and counts units (LUNs) 0-6 per controller: sda is
//     0:0:0:0, sdb 0:0:0:1, sdh 1:0:0:0. vmeta makes every SCSI controller
//     virtio-scsi (left alone, libvirt adds an emulated LSI one for sdh+).
//
//   - SATA disks (and the config drive cdrom): controller:0:0:port on an
//     AHCI controller (q35's built-in one, index 0, is 0000:00:1f.2); QEMU
//     gets {"driver":"ide-hd","bus":"ide.<port>"}. vmeta reports them on
//     the scsi bus like SCSI disks (model.MetadataBus), but Linux makes
//     every AHCI port a SCSI host of its own (ata<port+1>, H:C:T:L
//     <host>:0:0:0), so a guest matches a SATA disk by the AHCI
//     controller's PCI address and the port (the unit), not by target/LUN.
//
//   - IDE disks (machine types with IDE only): bus:unit.
//
// Target names are not guest names: in the same test libvirt's SCSI "sda"
// is the guest's sdb and the SATA "sdb" its sda — which is why devices are
// tagged. Serials do survive: virtio-blk's /sys/block/vdX/serial, and VPD
// page 0x80 of SCSI and SATA disks, carry the spec serial unchanged.

import (
	"encoding/xml"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/vmeta/vmeta/internal/model"
)

// Devices are the guest devices of one domain as its XML places them, in
// document order.
type Devices struct {
	Name   string
	UUID   string
	Disks  []DiskInfo
	NICs   []NICInfo
	Shares []ShareInfo
	// Hostdevs are the PCI passthrough devices (<hostdev type='pci'>).
	Hostdevs []HostdevInfo
}

// HostdevInfo is one PCI <hostdev>.
type HostdevInfo struct {
	// HostAddress is the host device (the <source> address), dddd:bb:ss.f.
	HostAddress string
	// Address is where the guest sees it (the hostdev's own <address>),
	// dddd:bb:ss.f; empty when the XML has none.
	Address string
}

// DriveAddress is libvirt's drive address (SCSI, SATA, IDE).
type DriveAddress struct {
	Controller, Bus, Target, Unit int
}

// DiskInfo is one <disk>.
type DiskInfo struct {
	// Target is the target dev name (vda, sdb).
	Target string
	// Bus is libvirt's target bus: virtio, scsi, sata, ide, usb.
	Bus string
	// Device is disk or cdrom.
	Device string
	Alias  string
	Serial string
	// Source is the image path.
	Source string
	// MetadataBus and Address are what device metadata reports: bus pci
	// with a PCI address for virtio, scsi with controller:bus:target:unit
	// for SCSI and SATA, ide with bus:unit, usb with bus:port. Address is
	// empty when the XML has none.
	MetadataBus string
	Address     string
	// Drive is the drive address of SCSI, SATA and IDE disks.
	Drive *DriveAddress
	// ControllerAddress is the PCI address of the SCSI or SATA controller
	// the disk sits on, when the XML gives it.
	ControllerAddress string
}

// NICInfo is one <interface>.
type NICInfo struct {
	MAC     string
	Alias   string
	Network string
	Model   string
	// Address is the PCI address (dddd:bb:ss.f); MetadataBus is "pci".
	MetadataBus string
	Address     string
}

// ShareInfo is one virtiofs <filesystem>.
type ShareInfo struct {
	// Tag is the mount tag (<target dir>).
	Tag    string
	Alias  string
	Source string
	// Address is the vhost-user-fs PCI address.
	Address string
}

// ParseDevices reads the devices of a domain XML document (inactive or
// live) and converts their addresses to the metadata form.
func ParseDevices(doc []byte) (*Devices, error) {
	var d domainXML
	if err := xml.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("parse domain XML: %w", err)
	}
	out := &Devices{Name: d.Name, UUID: d.UUID}
	var errs []error

	// Controllers, for the PCI address of each disk's HBA.
	ctrl := map[string]string{} // "scsi/0" -> PCI address
	for _, c := range d.Devices.Controllers {
		if c.Index == nil || c.Address == nil || c.Address.Type != "pci" {
			continue
		}
		if a, err := formatPCI(c.Address); err == nil {
			ctrl[c.Type+"/"+strconv.Itoa(*c.Index)] = a
		}
	}

	for _, x := range d.Devices.Disks {
		di := DiskInfo{
			Target: x.Target.Dev,
			Bus:    x.Target.Bus,
			Device: x.Device,
			Alias:  aliasName(x.Alias),
			Serial: x.Serial,
		}
		if x.Source != nil {
			di.Source = x.Source.File
			if di.Source == "" {
				di.Source = x.Source.Dev
			}
		}
		di.MetadataBus = model.MetadataBus(di.Bus)
		if x.Address != nil {
			if err := di.setAddress(x.Address, ctrl); err != nil {
				errs = append(errs, fmt.Errorf("disk %s: %w", di.Target, err))
			}
		}
		out.Disks = append(out.Disks, di)
	}
	for _, x := range d.Devices.Interfaces {
		ni := NICInfo{Alias: aliasName(x.Alias), MetadataBus: "pci"}
		if x.MAC != nil {
			ni.MAC = strings.ToLower(x.MAC.Address)
		}
		if x.Source != nil {
			ni.Network = x.Source.Network
		}
		if x.Model != nil {
			ni.Model = x.Model.Type
		}
		if x.Address != nil {
			a, err := formatPCI(x.Address)
			if err != nil {
				errs = append(errs, fmt.Errorf("interface %s: %w", ni.MAC, err))
			}
			ni.Address = a
		}
		out.NICs = append(out.NICs, ni)
	}
	for _, x := range d.Devices.Filesystems {
		if x.Driver == nil || x.Driver.Type != "virtiofs" {
			continue
		}
		si := ShareInfo{Tag: x.Target.Dir, Alias: aliasName(x.Alias)}
		if x.Source != nil {
			si.Source = x.Source.Dir
		}
		if x.Address != nil {
			a, err := formatPCI(x.Address)
			if err != nil {
				errs = append(errs, fmt.Errorf("filesystem %s: %w", si.Tag, err))
			}
			si.Address = a
		}
		out.Shares = append(out.Shares, si)
	}
	for _, x := range d.Devices.Hostdevs {
		if x.Type != "pci" {
			continue
		}
		s := x.Source.Address
		host, err := formatPCI(&addressXML{Type: "pci", Domain: s.Domain, Bus: s.Bus, Slot: s.Slot, Function: s.Function})
		if err != nil {
			errs = append(errs, fmt.Errorf("hostdev: source %w", err))
			continue
		}
		hi := HostdevInfo{HostAddress: host}
		if x.Address != nil {
			a, err := formatPCI(x.Address)
			if err != nil {
				errs = append(errs, fmt.Errorf("hostdev %s: %w", host, err))
			}
			hi.Address = a
		}
		out.Hostdevs = append(out.Hostdevs, hi)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("domain %s: %w", d.Name, errors.Join(errs...))
	}
	return out, nil
}

// Hostdev returns the PCI hostdev of host device addr (dddd:bb:ss.f).
func (d *Devices) Hostdev(addr string) (HostdevInfo, bool) {
	addr = strings.ToLower(addr)
	for _, x := range d.Hostdevs {
		if x.HostAddress == addr {
			return x, true
		}
	}
	return HostdevInfo{}, false
}

func (di *DiskInfo) setAddress(a *addressXML, ctrl map[string]string) error {
	switch a.Type {
	case "pci":
		s, err := formatPCI(a)
		di.Address = s
		return err
	case "drive":
		var v [4]int
		for i, s := range []string{a.Controller, a.Bus, a.Target, a.Unit} {
			n, err := strconv.ParseUint(s, 10, 32)
			if err != nil {
				return fmt.Errorf("drive address %+v: %w", *a, err)
			}
			v[i] = int(n)
		}
		di.Drive = &DriveAddress{Controller: v[0], Bus: v[1], Target: v[2], Unit: v[3]}
		if di.Bus == model.DiskBusIDE {
			di.Address = fmt.Sprintf("%x:%x", v[1], v[3])
		} else {
			di.Address = fmt.Sprintf("%x:%x:%x:%x", v[0], v[1], v[2], v[3])
		}
		ctype := di.Bus
		if ctype == model.DiskBusSATA {
			ctype = "sata"
		}
		di.ControllerAddress = ctrl[ctype+"/"+strconv.Itoa(v[0])]
	case "usb":
		bus, err1 := strconv.ParseUint(a.Bus, 10, 32)
		port, err2 := strconv.ParseUint(a.Port, 10, 32)
		if err1 == nil && err2 == nil {
			di.Address = fmt.Sprintf("%x:%x", bus, port)
		}
		// A port behind a hub ("1.2") has no metadata form.
	default:
		return fmt.Errorf("unexpected address type %q", a.Type)
	}
	return nil
}

// formatPCI formats a libvirt PCI address as dddd:bb:ss.f.
func formatPCI(a *addressXML) (string, error) {
	if a.Type != "pci" {
		return "", fmt.Errorf("address type %q, want pci", a.Type)
	}
	var v [4]uint64
	for i, s := range []string{a.Domain, a.Bus, a.Slot, a.Function} {
		n, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(s), "0x"), 16, 16)
		if err != nil {
			return "", fmt.Errorf("PCI address %+v: %w", *a, err)
		}
		v[i] = n
	}
	if v[1] > 0xff || v[2] > 0x1f || v[3] > 7 {
		return "", fmt.Errorf("PCI address %+v out of range", *a)
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", v[0], v[1], v[2], v[3]), nil
}

func aliasName(a *aliasXML) string {
	if a == nil {
		return ""
	}
	return a.Name
}

// Disk returns the disk with target dev name.
func (d *Devices) Disk(target string) (DiskInfo, bool) {
	for _, x := range d.Disks {
		if x.Target == target {
			return x, true
		}
	}
	return DiskInfo{}, false
}

// FreeTarget returns the first target name for bus (vdX for virtio, sdX
// for scsi, sata and usb, hdX for ide) that no disk of the domain uses —
// the config drive included — for a disk to hot-plug; "" if none of the 26
// is free.
func (d *Devices) FreeTarget(bus string) string {
	used := map[string]string{}
	for _, x := range d.Disks {
		used[x.Target] = x.Target
	}
	prefix := "sd"
	switch bus {
	case model.DiskBusVirtio, "":
		prefix = "vd"
	case model.DiskBusIDE:
		prefix = "hd"
	}
	return freeName(prefix, used)
}

// NIC returns the interface with MAC mac (any case).
func (d *Devices) NIC(mac string) (NICInfo, bool) {
	mac = strings.ToLower(mac)
	for _, x := range d.NICs {
		if x.MAC == mac {
			return x, true
		}
	}
	return NICInfo{}, false
}

// Share returns the virtiofs share with mount tag tag.
func (d *Devices) Share(tag string) (ShareInfo, bool) {
	for _, x := range d.Shares {
		if x.Tag == tag {
			return x, true
		}
	}
	return ShareInfo{}, false
}

// Apply copies what the hypervisor decided into the spec devices of in:
// each disk's address and serial (matched by target name), each NIC's MAC
// and PCI address (matched by MAC; a NIC defined without a MAC by its
// alias, NICAlias(“”, index)), each passthrough device's guest PCI
// address (matched by its host address), and checks that every share (by tag) is
// there. Spec devices missing from the XML are reported, all at once, as
// FieldErrors; the others are filled in regardless.
func (d *Devices) Apply(in *model.Instance) error {
	var errs []error
	for i := range in.Disks {
		k := &in.Disks[i]
		x, ok := d.Disk(k.Name)
		if !ok {
			errs = append(errs, fieldErr(fmt.Sprintf("disks[%d]", i), "disk %s is not in domain %s", k.Name, d.Name))
			continue
		}
		k.Address = x.Address
		k.Serial = x.Serial
	}
	claimed := map[string]bool{}
	for _, n := range in.NICs {
		if n.MAC != "" {
			claimed[strings.ToLower(n.MAC)] = true
		}
	}
	for i := range in.NICs {
		n := &in.NICs[i]
		var x NICInfo
		var ok bool
		if n.MAC != "" {
			x, ok = d.NIC(n.MAC)
		} else {
			alias := NICAlias("", i)
			for _, c := range d.NICs {
				if c.Alias == alias && !claimed[c.MAC] {
					x, ok = c, true
					break
				}
			}
		}
		if !ok {
			what := n.MAC
			if what == "" {
				what = "alias " + NICAlias("", i)
			}
			errs = append(errs, fieldErr(fmt.Sprintf("nics[%d]", i), "interface %s is not in domain %s", what, d.Name))
			continue
		}
		claimed[x.MAC] = true
		n.MAC = x.MAC
		n.Bus = "pci"
		n.Address = x.Address
	}
	for i, s := range in.Shares {
		if _, ok := d.Share(s.EffectiveTag()); !ok {
			errs = append(errs, fieldErr(fmt.Sprintf("shares[%d]", i), "virtiofs tag %s is not in domain %s", s.EffectiveTag(), d.Name))
		}
	}
	for i := range in.PCIDevices {
		p := &in.PCIDevices[i]
		x, ok := d.Hostdev(p.Address)
		if !ok {
			errs = append(errs, fieldErr(fmt.Sprintf("pci_devices[%d]", i), "hostdev %s is not in domain %s", p.Address, d.Name))
			continue
		}
		p.GuestAddress = x.Address
	}
	return errors.Join(errs...)
}

// DeviceRef names the spec device behind a vmeta alias.
type DeviceRef struct {
	// Kind is "disk", "nic", "share" or "config-drive".
	Kind string
	// Disk is the target name (disks); MAC the NIC's MAC when its alias
	// carries one; Index the NIC's spec index when it does not (else -1);
	// Tag the share's mount tag.
	Disk  string
	MAC   string
	Index int
	Tag   string
}

// ParseAlias maps a libvirt alias (as in a device-removed event) back to
// the spec device it was given to; ok is false for aliases vmeta did not
// set (libvirt's own "virtio-disk0", "net1", ...).
func ParseAlias(alias string) (ref DeviceRef, ok bool) {
	ref.Index = -1
	switch {
	case alias == ConfigDriveAlias:
		ref.Kind = "config-drive"
	case strings.HasPrefix(alias, "ua-disk-"):
		ref.Kind, ref.Disk = "disk", strings.TrimPrefix(alias, "ua-disk-")
	case strings.HasPrefix(alias, "ua-fs-"):
		ref.Kind, ref.Tag = "share", strings.TrimPrefix(alias, "ua-fs-")
	case strings.HasPrefix(alias, "ua-nic-"):
		rest := strings.TrimPrefix(alias, "ua-nic-")
		ref.Kind = "nic"
		if len(rest) == 12 {
			if _, err := strconv.ParseUint(rest, 16, 64); err == nil {
				ref.MAC = rest[0:2] + ":" + rest[2:4] + ":" + rest[4:6] + ":" + rest[6:8] + ":" + rest[8:10] + ":" + rest[10:12]
				return ref, true
			}
		}
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 {
			return DeviceRef{Index: -1}, false
		}
		ref.Index = n
	default:
		return DeviceRef{Index: -1}, false
	}
	return ref, true
}
