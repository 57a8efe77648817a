package virt

import (
	"crypto/rand"
	"encoding/xml"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/vmeta/vmeta/internal/model"
)

// DomainType is libvirt's <domain type>: the accelerator.
type DomainType string

const (
	// TypeQEMU is TCG, pure emulation: slow, works everywhere. The default,
	// because on machines with incomplete nested virtualisation /dev/kvm
	// opens and `virsh start` succeeds, yet guests stop at once ("KVM
	// internal error. Suberror: 1").
	TypeQEMU DomainType = "qemu"
	// TypeKVM uses hardware virtualisation; choose it where a guest has
	// been seen to boot under KVM.
	TypeKVM DomainType = "kvm"
)

// ParseDomainType parses "qemu"/"tcg" or "kvm" (for a flag or an
// environment variable); "" is TypeQEMU.
func ParseDomainType(s string) (DomainType, error) {
	switch strings.ToLower(s) {
	case "", "qemu", "tcg":
		return TypeQEMU, nil
	case "kvm":
		return TypeKVM, nil
	}
	return "", fmt.Errorf("unknown domain type %q (want qemu, tcg or kvm)", s)
}

// Options shape the domains BuildDomain writes: what the host decides, not
// the instance spec.
type Options struct {
	// Type is the accelerator; TypeQEMU when empty.
	Type DomainType
	// Machine is the QEMU machine type; "q35" when empty.
	Machine string
	// MemoryMiB is the guest memory; 512 when 0.
	MemoryMiB int
	// VCPUs is the number of virtual CPUs; 1 when 0.
	VCPUs int
	// Emulator is the QEMU binary; libvirt's default when empty.
	Emulator string
	// DefaultNetwork is the libvirt network of NICs whose spec names none;
	// model.DefaultNetwork when empty.
	DefaultNetwork string
	// SharedMemory backs guest memory with shared memfd even without
	// shares, so virtiofs shares can be hot-plugged later (virtiofs needs
	// shared memory from boot).
	SharedMemory bool
	// HotplugPorts is the number of free pcie-root-ports a q35 domain has
	// after define, each of which can take one hot-plugged PCI device
	// (libvirt leaves at most one by itself). 4 when 0; negative for none.
	HotplugPorts int
	// ConfigDriveBus is how the config drive is attached: "sata" (a
	// read-only cdrom, the default, as Nova does on q35) or "virtio" (a
	// read-only virtio disk, for guest kernels without AHCI such as
	// Debian's linux-image-cloud-amd64; cloud-init finds the drive by its
	// label either way). Only a cdrom can change media while the guest
	// runs (ConfigDriveMediaXML): a running guest with a virtio config
	// drive keeps the drive it booted with until it is restarted, and
	// learns of later changes from the metadata service alone.
	ConfigDriveBus string
	// Kernel, Initrd and Cmdline boot a kernel directly instead of from
	// the first disk (tests, appliances). Host paths, not checked against
	// the data directory: they come from the operator, not the spec.
	Kernel, Initrd, Cmdline string
}

func (o Options) withDefaults() Options {
	if o.Type == "" {
		o.Type = TypeQEMU
	}
	if o.Machine == "" {
		o.Machine = MachineQ35
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = 512
	}
	if o.VCPUs == 0 {
		o.VCPUs = 1
	}
	if o.DefaultNetwork == "" {
		o.DefaultNetwork = model.DefaultNetwork
	}
	if o.HotplugPorts == 0 {
		o.HotplugPorts = 4
	}
	if o.ConfigDriveBus == "" {
		o.ConfigDriveBus = model.DiskBusSATA
	}
	return o
}

// DiskSource is the host side of a disk: its image file.
type DiskSource struct {
	// Path of the image, inside the data directory.
	Path string
	// Format is the image format, "qcow2" when empty, or "raw".
	Format string
	// SecretUUID, when set, names the libvirt secret (usage volume) that
	// holds the LUKS passphrase; the disk is opened with
	// <encryption format='luks'>.
	SecretUUID string
	// Backing, when set, is the image's encrypted backing file (an
	// overlay of an encrypted image): the domain names it in an explicit
	// <backingStore> with its own <encryption> and libvirt secret, as
	// QEMU opens each layer of the chain with its own key.
	Backing *BackingSource
}

// BackingSource is the encrypted backing file of a disk image.
type BackingSource struct {
	// Path of the backing file, inside the data directory.
	Path string
	// Format is its image format, "qcow2" when empty.
	Format string
	// SecretUUID names the libvirt secret holding its LUKS passphrase.
	SecretUUID string
}

// Host holds the host paths and names of one instance: where its disk
// images, config drive and console log live, which directories its shares
// export, and which libvirt networks its NICs join.
type Host struct {
	// DataDir is hostctl's data directory; every image, the config drive
	// and the serial log must resolve inside it (ResolveInDataDir).
	DataDir string
	// Disks maps each spec disk (by name, e.g. "vdb") to its image.
	Disks map[string]DiskSource
	// ConfigDrive is the config drive image (ISO 9660 or vfat), attached
	// read-only as a SATA cdrom; none when empty.
	ConfigDrive string
	// ConfigDriveDev is the cdrom's target name; the first sdX no disk uses
	// when empty.
	ConfigDriveDev string
	// SerialLog receives the guest's serial console (virtlogd writes it);
	// none when empty.
	SerialLog string
	// ShareDirs maps a share ID to the host directory virtiofsd exports;
	// the share's Source when absent (which must then be an absolute
	// directory, not an NFS export).
	ShareDirs map[string]string
	// Networks maps a NIC's spec network to a libvirt network name; the
	// spec name itself when absent, Options.DefaultNetwork when the spec
	// names none.
	Networks map[string]string
	// Extra are device elements the controller's parts contribute
	// (hostctl/part: a watchdog), each one XML element, appended to
	// <devices> as given.
	Extra [][]byte
	// Firmware are the domain's fw_cfg entries (<sysinfo type='fwcfg'>,
	// firmware.go), each a file in the data directory that QEMU reads
	// when the domain starts (it need not exist before); none when empty.
	Firmware []FirmwareFile
}

// SMBIOS identity: cloud-init's OpenStack datasource only runs on x86 when
// DMI system-product-name is "OpenStack Nova" (or "OpenStack Compute").
const (
	SMBIOSManufacturer = "OpenStack Foundation"
	SMBIOSProduct      = "OpenStack Nova"
	SMBIOSFamily       = "Virtual Machine"
)

// ConfigDriveAlias is the libvirt alias of the config drive. Every vmeta
// alias starts with "ua-", which marks a user alias libvirt keeps.
const ConfigDriveAlias = "ua-config-drive"

// DiskAlias is the libvirt alias of spec disk name.
func DiskAlias(name string) string { return "ua-disk-" + name }

// NICAlias is the libvirt alias of a NIC: from its MAC when it has one,
// else from its index in the spec (at define time libvirt then generates
// the MAC, and the alias finds the NIC again).
func NICAlias(mac string, index int) string {
	if mac != "" {
		return "ua-nic-" + strings.ReplaceAll(strings.ToLower(mac), ":", "")
	}
	return "ua-nic-" + strconv.Itoa(index)
}

// ShareAlias is the libvirt alias of a virtiofs share with mount tag tag.
func ShareAlias(tag string) string { return "ua-fs-" + tag }

// GenerateMAC returns a random MAC in QEMU's locally administered range
// 52:54:00:xx:xx:xx, for a NIC hot-plugged without one.
func GenerateMAC() (string, error) {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate MAC: %w", err)
	}
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", b[0], b[1], b[2]), nil
}

// BuildDomain writes the libvirt domain XML of instance in: a q35 machine
// (by default) under TCG, SMBIOS "OpenStack Nova" with the instance UUID,
// its disks, NICs, shares and PCI devices, the config drive read-only (a
// SATA cdrom unless Options.ConfigDriveBus says virtio) and the serial
// console logged to host.SerialLog. Spec
// addresses are honoured (libvirt assigns the rest at define time). The
// instance is checked first (Validate); nothing is returned for a refused
// one.
func BuildDomain(in *model.Instance, host Host, opts Options) ([]byte, error) {
	// The instance's own size (its flavor's) wins over the host's.
	if in.VCPUs > 0 {
		opts.VCPUs = in.VCPUs
	}
	if in.MemoryMiB > 0 {
		opts.MemoryMiB = in.MemoryMiB
	}
	opts = opts.withDefaults()
	d, err := buildDomain(in, host, opts)
	if err != nil {
		return nil, fmt.Errorf("build domain %q: %w", in.Name, specError(err))
	}
	out, err := xml.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("build domain %q: encode: %w", in.Name, err)
	}
	return append(out, '\n'), nil
}

// Validate checks what BuildDomain would refuse, without building: the
// name, every disk's bus (on opts.Machine), name, serial, address and image
// path, the config drive and serial log paths, every NIC's bus, MAC and
// address, every share's directory, and duplicate target names.
func Validate(in *model.Instance, host Host, opts Options) error {
	_, err := buildDomain(in, host, opts.withDefaults())
	return specError(err)
}

func buildDomain(in *model.Instance, host Host, opts Options) (*domainXML, error) {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(ValidateName(in.Name))
	if in.UUID == "" {
		add(fieldErr("uuid", "is required (the domain's UUID and SMBIOS serial)"))
	}
	switch opts.Type {
	case TypeQEMU, TypeKVM:
	default:
		add(fmt.Errorf("options: unknown domain type %q", opts.Type))
	}

	d := &domainXML{
		Type:   string(opts.Type),
		Name:   in.Name,
		UUID:   in.UUID,
		Memory: &memoryXML{Unit: "MiB", Value: opts.MemoryMiB},
		VCPU:   opts.VCPUs,
		SysInfo: []sysInfoXML{{Type: "smbios", System: []sysEntryList{{Entries: []sysEntryXML{
			{Name: "manufacturer", Value: SMBIOSManufacturer},
			{Name: "product", Value: SMBIOSProduct},
			{Name: "serial", Value: in.UUID},
			{Name: "uuid", Value: in.UUID},
			{Name: "family", Value: SMBIOSFamily},
		}}}}},
		OS: &osXML{
			Type:   osTypeXML{Arch: "x86_64", Machine: opts.Machine, Value: "hvm"},
			SMBIOS: &modeAttrXML{Mode: "sysinfo"},
		},
		Features:   &featuresXML{ACPI: &struct{}{}, APIC: &struct{}{}},
		Clock:      &clockXML{Offset: "utc"},
		OnPoweroff: "destroy",
		OnReboot:   "restart",
		OnCrash:    "destroy",
	}
	if len(host.Firmware) > 0 {
		add(CheckFirmwareFiles(host.DataDir, host.Firmware))
		block := sysInfoXML{Type: "fwcfg"}
		for _, f := range host.Firmware {
			block.Entries = append(block.Entries, fwCfgEntryXML{Name: f.Name, File: f.File})
		}
		d.SysInfo = append(d.SysInfo, block)
	}
	if opts.Kernel != "" {
		d.OS.Kernel, d.OS.Initrd, d.OS.Cmdline = opts.Kernel, opts.Initrd, opts.Cmdline
	} else {
		d.OS.Boot = &bootXML{Dev: "hd"}
	}
	// TCG emulates the most capable CPU it can ("maximum", QEMU's -cpu
	// max), so guests built for x86-64-v2 and later run; KVM passes the
	// host CPU through.
	if opts.Type == TypeKVM {
		d.CPU = &cpuXML{Mode: "host-passthrough", Check: "none"}
	} else {
		d.CPU = &cpuXML{Mode: "maximum", Check: "none"}
	}
	if len(in.Shares) > 0 || opts.SharedMemory {
		d.MemoryBacking = &memoryBackingXML{Source: &typeAttrXML{Type: "memfd"}, Access: &modeAttrXML{Mode: "shared"}}
	}
	dev := &d.Devices
	dev.Emulator = opts.Emulator

	// Disks.
	targets := map[string]string{} // target dev -> field that uses it
	scsiControllers := map[int]bool{0: true}
	for i, disk := range in.Disks {
		f := fmt.Sprintf("disks[%d]", i)
		if prev, dup := targets[disk.Name]; dup {
			add(fieldErr(f+".name", "%q is already the target of %s", disk.Name, prev))
		}
		targets[disk.Name] = f
		x, err := diskDevice(f, disk, host, opts)
		if err != nil {
			add(err)
			continue
		}
		if x.Target.Bus == model.DiskBusSCSI {
			scsiControllers[scsiController(x)] = true
		}
		dev.Disks = append(dev.Disks, *x)
	}
	if host.ConfigDrive != "" {
		x, err := configDriveDisk(host, opts, targets)
		if err != nil {
			add(err)
		} else {
			dev.Disks = append(dev.Disks, *x)
		}
	}

	// Shares.
	tags := map[string]string{}
	for i, s := range in.Shares {
		f := fmt.Sprintf("shares[%d]", i)
		x, err := shareDevice(f, s, host)
		if err != nil {
			add(err)
			continue
		}
		if prev, dup := tags[x.Target.Dir]; dup {
			add(fieldErr(f+".tag", "%q is already the tag of %s", x.Target.Dir, prev))
		}
		tags[x.Target.Dir] = f
		dev.Filesystems = append(dev.Filesystems, *x)
	}

	// NICs.
	macs := map[string]string{}
	for i, n := range in.NICs {
		f := fmt.Sprintf("nics[%d]", i)
		x, err := nicDevice(f, n, i, host, opts)
		if err != nil {
			add(err)
			continue
		}
		if x.MAC != nil {
			if prev, dup := macs[x.MAC.Address]; dup {
				add(fieldErr(f+".mac", "%s is already the MAC of %s", x.MAC.Address, prev))
			}
			macs[x.MAC.Address] = f
		}
		dev.Interfaces = append(dev.Interfaces, *x)
	}

	// PCI passthrough.
	for i, p := range in.PCIDevices {
		f := fmt.Sprintf("pci_devices[%d].address", i)
		a, err := pciAddress(p.Address)
		if err != nil {
			add(fieldErr(f, "%v", err))
			continue
		}
		hd := hostdevXML{Mode: "subsystem", Type: "pci", Managed: "yes", Source: hostdevSourceXML{Address: hostAddressXML{Domain: a.Domain, Bus: a.Bus, Slot: a.Slot, Function: a.Function}}}
		if g := p.GuestAddress; g != "" && g != "none" {
			// The guest-side address the spec asks for; otherwise libvirt
			// places the device and the read-back reports where.
			ga, err := pciAddress(g)
			if err != nil {
				add(fieldErr(fmt.Sprintf("pci_devices[%d].guest_address", i), "%v", err))
				continue
			}
			hd.Address = ga
		}
		dev.Hostdevs = append(dev.Hostdevs, hd)
	}

	// Serial console: a pty (virsh console works) whose output virtlogd
	// also appends to the log file.
	if host.SerialLog != "" {
		p, err := ResolveInDataDir(host.DataDir, host.SerialLog)
		if err != nil {
			add(fieldErr("serial log", "%v", err))
		}
		dev.Serials = []serialXML{{Type: "pty", Log: &serialLog{File: p, Append: "on"}}}
	}
	dev.RNGs = []rngXML{{Model: "virtio", Backend: rngBackendXML{Model: "random", Value: "/dev/urandom"}}}
	for i, raw := range host.Extra {
		e, err := parseExtraDevice(raw)
		if err != nil {
			add(fieldErr(fmt.Sprintf("extra device %d", i), "%v", err))
			continue
		}
		dev.Extra = append(dev.Extra, e)
	}

	// Controllers: a virtio-scsi HBA for every SCSI controller index in
	// use, and controller 0 always, so SCSI disks can be hot-plugged (left
	// to itself libvirt would add an emulated LSI controller).
	for _, idx := range sortedKeys(scsiControllers) {
		dev.Controllers = append(dev.Controllers, controllerXML{Type: "scsi", Index: &idx, Model: "virtio-scsi"})
	}
	// pcie-root-ports, as indices 1..n (0 is pcie-root). libvirt puts every
	// PCIe device without an address on the first free port and adds ports
	// only when none is free, so a spare is only left over if there are
	// more ports than devices: one per device that takes one (every
	// virtio device and controller, passthrough device, and the USB
	// controller and memory balloon libvirt adds) plus HotplugPorts.
	if machineFamily(opts.Machine) == MachineQ35 {
		ports := max(opts.HotplugPorts, 0)
		if ports > 0 {
			ports += rootPortDevices(dev)
		}
		for i := range ports {
			idx := i + 1
			dev.Controllers = append(dev.Controllers, controllerXML{Type: "pci", Index: &idx, Model: "pcie-root-port"})
		}
	}

	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return d, nil
}

// configDriveDisk is the config drive: a read-only SATA cdrom, or a
// read-only virtio disk, on the first target name no disk uses unless
// host.ConfigDriveDev names one.
func configDriveDisk(host Host, opts Options, targets map[string]string) (*diskXML, error) {
	const f = "config drive"
	device, prefix := "cdrom", "sd"
	switch opts.ConfigDriveBus {
	case model.DiskBusSATA:
	case model.DiskBusVirtio:
		device, prefix = "disk", "vd"
	default:
		return nil, fieldErr(f, "bus %q is not supported (want sata or virtio)", opts.ConfigDriveBus)
	}
	var errs []error
	name := host.ConfigDriveDev
	if name == "" {
		name = freeName(prefix, targets)
	}
	if name == "" {
		errs = append(errs, fieldErr(f, "no free %sX target left", prefix))
	} else if prev, dup := targets[name]; dup {
		errs = append(errs, fieldErr(f, "target %q is already the target of %s", name, prev))
	} else if err := CheckDiskName(opts.ConfigDriveBus, name); err != nil {
		errs = append(errs, fieldErr(f, "%v", err))
	}
	p, err := ResolveInDataDir(host.DataDir, host.ConfigDrive)
	if err != nil {
		errs = append(errs, fieldErr(f, "%v", err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &diskXML{
		Type: "file", Device: device,
		Driver:   &diskDriverXML{Name: "qemu", Type: "raw"},
		Source:   &diskSourceXML{File: p},
		Target:   diskTargetXML{Dev: name, Bus: opts.ConfigDriveBus},
		ReadOnly: &struct{}{},
		Alias:    &aliasXML{Name: ConfigDriveAlias},
	}, nil
}

// ConfigDriveMediaXML writes the config drive cdrom's <disk> element with
// host.ConfigDrive as its medium, for Conn.UpdateDevice on a running
// domain (AffectLive|AffectForce: `virsh change-media --update --force`).
// host.ConfigDriveDev must name the cdrom's target (as the live XML has
// it); libvirt finds the cdrom by it and changes only the medium. Give the
// new medium a file name of its own: libvirt does nothing when the source
// path is unchanged, and a file rewritten in place could be read half
// written. A virtio config drive, which has no removable medium, is
// refused.
func ConfigDriveMediaXML(host Host, opts Options) ([]byte, error) {
	opts = opts.withDefaults()
	if opts.ConfigDriveBus == model.DiskBusVirtio {
		return nil, errors.New("a virtio config drive has no removable medium: the running guest sees a rebuilt drive only after a restart")
	}
	if host.ConfigDriveDev == "" {
		return nil, fieldErr("config drive", "no target: name the cdrom's target dev (ConfigDriveDev)")
	}
	if host.ConfigDrive == "" {
		return nil, fieldErr("config drive", "no medium: ConfigDrive is empty")
	}
	x, err := configDriveDisk(host, opts, map[string]string{})
	if err != nil {
		return nil, fmt.Errorf("config drive medium: %w", err)
	}
	return marshalDevice(x)
}

// rootPortDevices counts the devices of dev that will each take a
// pcie-root-port: all PCI devices except those given an address on bus 0
// (integrated endpoints), plus the qemu-xhci USB controller and the
// virtio memory balloon libvirt adds to every q35 domain.
func rootPortDevices(dev *devicesXML) int {
	onPort := func(a *addressXML) bool {
		return a == nil || a.Type != "pci" || strings.TrimLeft(strings.TrimPrefix(a.Bus, "0x"), "0") != ""
	}
	n := 2 // usb, memballoon
	for _, d := range dev.Disks {
		if d.Target.Bus == model.DiskBusVirtio && onPort(d.Address) {
			n++
		}
	}
	for _, c := range dev.Controllers {
		if c.Type == "scsi" {
			n++
		}
	}
	for _, i := range dev.Interfaces {
		if onPort(i.Address) {
			n++
		}
	}
	n += len(dev.Filesystems) + len(dev.Hostdevs) + len(dev.RNGs)
	return n
}

// DiskDeviceXML writes the <disk> element of one spec disk, for hot-plug
// (Conn.AttachDevice) or detach. The checks are BuildDomain's.
func DiskDeviceXML(disk model.Disk, host Host, opts Options) ([]byte, error) {
	x, err := diskDevice("disk", disk, host, opts.withDefaults())
	if err != nil {
		return nil, fmt.Errorf("disk %s: %w", disk.Name, specError(err))
	}
	return marshalDevice(x)
}

// NICDeviceXML writes the <interface> element of one spec NIC; index is
// its position in the spec (used for the alias when it has no MAC, see
// NICAlias; give hot-plugged NICs a MAC, e.g. from GenerateMAC).
func NICDeviceXML(n model.NIC, index int, host Host, opts Options) ([]byte, error) {
	x, err := nicDevice("nic", n, index, host, opts.withDefaults())
	if err != nil {
		return nil, fmt.Errorf("nic %d: %w", index, specError(err))
	}
	return marshalDevice(x)
}

// ShareDeviceXML writes the <filesystem> element of one virtiofs share.
// Hot-plugging it needs a domain built with shared memory
// (Options.SharedMemory or a share at build time).
func ShareDeviceXML(s model.Share, host Host) ([]byte, error) {
	x, err := shareDevice("share", s, host)
	if err != nil {
		return nil, fmt.Errorf("share %s: %w", s.ShareID, specError(err))
	}
	return marshalDevice(x)
}

func marshalDevice(v any) ([]byte, error) {
	out, err := xml.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode device: %w", err)
	}
	return out, nil
}

func diskDevice(f string, disk model.Disk, host Host, opts Options) (*diskXML, error) {
	var errs []error
	bus := disk.Bus
	if bus == "" {
		bus = model.DiskBusVirtio
	}
	if err := CheckDiskBus(opts.Machine, bus); err != nil {
		// Nothing else about the disk is meaningful on an unusable bus.
		return nil, fieldErr(f+".bus", "%v", err)
	}
	if err := CheckDiskName(bus, disk.Name); err != nil {
		errs = append(errs, fieldErr(f+".name", "%v", err))
	}
	if err := CheckSerial(bus, disk.Serial); err != nil {
		errs = append(errs, fieldErr(f+".serial", "%v", err))
	}
	addr, err := specDiskAddress(bus, disk.Address)
	if err != nil {
		errs = append(errs, fieldErr(f+".address", "%v", err))
	}
	src, ok := host.Disks[disk.Name]
	var path string
	if !ok || src.Path == "" {
		errs = append(errs, fieldErr(f, "no image path for disk %q", disk.Name))
	} else if path, err = ResolveInDataDir(host.DataDir, src.Path); err != nil {
		errs = append(errs, fieldErr(f+" image", "%v", err))
	}
	format := src.Format
	switch format {
	case "":
		format = "qcow2"
	case "qcow2", "raw":
	default:
		errs = append(errs, fieldErr(f+" image", "unknown format %q (want qcow2 or raw)", format))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	x := &diskXML{
		Type: "file", Device: "disk",
		Driver:  &diskDriverXML{Name: "qemu", Type: format},
		Source:  &diskSourceXML{File: path},
		Target:  diskTargetXML{Dev: disk.Name, Bus: bus},
		Serial:  disk.Serial,
		Alias:   &aliasXML{Name: DiskAlias(disk.Name)},
		Address: addr,
	}
	if src.SecretUUID != "" {
		x.Source.Encryption = &encryptionXML{Format: "luks", Secret: secretXML{Type: "passphrase", UUID: src.SecretUUID}}
	}
	if b := src.Backing; b != nil {
		bpath, err := ResolveInDataDir(host.DataDir, b.Path)
		if err != nil {
			return nil, fieldErr(f+" backing image", "%v", err)
		}
		bformat := b.Format
		if bformat == "" {
			bformat = "qcow2"
		}
		if bformat != "qcow2" || b.SecretUUID == "" {
			return nil, fieldErr(f+" backing image", "an encrypted backing file is a LUKS qcow2 with its secret (format %q, secret %q)", b.Format, b.SecretUUID)
		}
		// The chain ends here: an encrypted image has no backing file of
		// its own (<backingStore/> tells libvirt not to probe further).
		x.BackingStore = &backingStoreXML{Type: "file", Format: &typeAttrXML{Type: bformat},
			Source: &diskSourceXML{File: bpath, Encryption: &encryptionXML{Format: "luks", Secret: secretXML{Type: "passphrase", UUID: b.SecretUUID}}},
			End:    &struct{}{}}
	}
	return x, nil
}

func nicDevice(f string, n model.NIC, index int, host Host, opts Options) (*interfaceXML, error) {
	var errs []error
	switch n.Bus {
	case "", "pci":
	case "none":
		errs = append(errs, fieldErr(f+".bus", "none cannot be honoured: a QEMU guest's NICs are PCI devices"))
	default:
		errs = append(errs, fieldErr(f+".bus", "unknown bus %q (want pci)", n.Bus))
	}
	mac := strings.ToLower(n.MAC)
	if mac != "" {
		if hw, err := model.ParseMAC(mac); err != nil {
			errs = append(errs, fieldErr(f+".mac", "%q is not a MAC address aa:bb:cc:dd:ee:ff", n.MAC))
		} else if hw[0]&1 == 1 {
			errs = append(errs, fieldErr(f+".mac", "%s is a multicast address", mac))
		}
	}
	var addr *addressXML
	if n.Address != "" && n.Address != "none" {
		a, err := pciAddress(n.Address)
		if err != nil {
			errs = append(errs, fieldErr(f+".address", "%v", err))
		}
		addr = a
	}
	if n.MTU < 0 {
		errs = append(errs, fieldErr(f+".mtu", "must not be negative"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	network := opts.DefaultNetwork
	if n.Network != "" {
		network = n.Network
		if m, ok := host.Networks[n.Network]; ok {
			network = m
		}
	}
	x := &interfaceXML{
		Type:    "network",
		Source:  &interfaceSourceXML{Network: network},
		Model:   &typeAttrXML{Type: "virtio"},
		Alias:   &aliasXML{Name: NICAlias(mac, index)},
		Address: addr,
	}
	if mac != "" {
		x.MAC = &macXML{Address: mac}
	}
	if n.MTU > 0 {
		x.MTU = &mtuXML{Size: n.MTU}
	}
	return x, nil
}

func shareDevice(f string, s model.Share, host Host) (*filesystemXML, error) {
	tag := s.EffectiveTag()
	var errs []error
	if tag == "" {
		errs = append(errs, fieldErr(f+".tag", "is empty (and so is share_id)"))
	} else if !aliasSafeRE.MatchString(tag) {
		errs = append(errs, fieldErr(f+".tag", "%q may contain only ASCII letters, digits, '_' and '-'", tag))
	}
	dir, ok := host.ShareDirs[s.ShareID]
	if !ok {
		dir = s.Source
	}
	switch {
	case dir == "":
		errs = append(errs, fieldErr(f+".source", "no host directory for share %q", s.ShareID))
	case !filepath.IsAbs(dir):
		errs = append(errs, fieldErr(f+".source", "%q is not an absolute host directory (an NFS export must be mounted first)", dir))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &filesystemXML{
		Type: "mount", AccessMode: "passthrough",
		Driver: &typeAttrXML{Type: "virtiofs"},
		Source: &filesystemDirXML{Dir: filepath.Clean(dir)},
		Target: filesystemTargetXML{Dir: tag},
		Alias:  &aliasXML{Name: ShareAlias(tag)},
	}, nil
}

var (
	aliasSafeRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	driveRE     = regexp.MustCompile(`^([0-9a-f]+):([0-9a-f]+):([0-9a-f]+):([0-9a-f]+)$`)
	ideRE       = regexp.MustCompile(`^([01]):([01])$`)
)

// pciAddress turns the metadata form dddd:bb:ss.f into a libvirt address.
func pciAddress(s string) (*addressXML, error) {
	a, err := model.ParsePCIAddress(strings.ToLower(s))
	if err != nil {
		return nil, fmt.Errorf("%q is not a PCI address dddd:bb:ss.f", s)
	}
	if a.Slot > model.MaxPCISlot {
		return nil, fmt.Errorf("%q: slot %02x is above %x", s, a.Slot, model.MaxPCISlot)
	}
	return &addressXML{Type: "pci",
		Domain: fmt.Sprintf("0x%04x", a.Domain), Bus: fmt.Sprintf("0x%02x", a.Bus),
		Slot: fmt.Sprintf("0x%02x", a.Slot), Function: fmt.Sprintf("0x%x", a.Function)}, nil
}

// specDiskAddress turns a disk's spec address (metadata form) into a
// libvirt address: PCI for virtio, controller:bus:target:unit (hex) for
// SCSI and SATA, bus:unit for IDE. "" and "none" leave it to libvirt.
func specDiskAddress(bus, s string) (*addressXML, error) {
	if s == "" || s == "none" {
		return nil, nil
	}
	s = strings.ToLower(s)
	switch bus {
	case model.DiskBusVirtio:
		return pciAddress(s)
	case model.DiskBusSCSI, model.DiskBusSATA:
		m := driveRE.FindStringSubmatch(s)
		if m == nil {
			return nil, fmt.Errorf("%q is not a drive address controller:bus:target:unit (hex)", s)
		}
		var v [4]uint64
		for i := range v {
			var err error
			if v[i], err = strconv.ParseUint(m[i+1], 16, 32); err != nil {
				return nil, fmt.Errorf("%q: %w", s, err)
			}
		}
		if bus == model.DiskBusSATA && (v[1] != 0 || v[2] != 0 || v[3] > 5) {
			return nil, fmt.Errorf("%q: a SATA address is controller:0:0:port with port 0-5", s)
		}
		if bus == model.DiskBusSCSI && v[1] != 0 {
			return nil, fmt.Errorf("%q: virtio-scsi has one channel (bus 0)", s)
		}
		return &addressXML{Type: "drive",
			Controller: strconv.FormatUint(v[0], 10), Bus: strconv.FormatUint(v[1], 10),
			Target: strconv.FormatUint(v[2], 10), Unit: strconv.FormatUint(v[3], 10)}, nil
	case model.DiskBusIDE:
		m := ideRE.FindStringSubmatch(s)
		if m == nil {
			return nil, fmt.Errorf("%q is not an IDE address bus:unit (each 0 or 1)", s)
		}
		return &addressXML{Type: "drive", Controller: "0", Bus: m[1], Target: "0", Unit: m[2]}, nil
	case model.DiskBusUSB:
		return nil, fmt.Errorf("%q: USB disk addresses are chosen by libvirt", s)
	}
	return nil, fmt.Errorf("bus %q takes no address", bus)
}

// scsiController is the SCSI controller index a disk will sit on: its
// explicit address, or what libvirt derives from the name (7 units per
// controller: sda-sdg on 0, sdh-sdn on 1, ...).
func scsiController(x *diskXML) int {
	if x.Address != nil {
		c, _ := strconv.Atoi(x.Address.Controller)
		return c
	}
	return max(diskIndex(x.Target.Dev), 0) / 7
}

// diskIndex is libvirt's virDiskNameToIndex: the letters after the
// two-letter prefix in bijective base 26 (a=0, z=25, aa=26).
func diskIndex(name string) int {
	if len(name) < 3 {
		return -1
	}
	idx := 0
	for _, c := range name[2:] {
		if c < 'a' || c > 'z' {
			return -1
		}
		idx = idx*26 + int(c-'a') + 1
	}
	return idx - 1
}

// freeName is the first target prefix+letter no disk uses ("" when all
// 26 are).
func freeName(prefix string, used map[string]string) string {
	for c := 'a'; c <= 'z'; c++ {
		if name := prefix + string(c); used[name] == "" {
			return name
		}
	}
	return ""
}

func sortedKeys(m map[int]bool) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
