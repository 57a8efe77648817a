package virt

import "encoding/xml"

// The structs below are the subset of libvirt's domain XML vmeta writes and
// reads (https://libvirt.org/formatdomain.html). The same types serve
// BuildDomain (marshalling) and ParseDevices (unmarshalling live or
// inactive XML, where libvirt adds much more; unknown elements are
// ignored).

type domainXML struct {
	XMLName       xml.Name          `xml:"domain"`
	Type          string            `xml:"type,attr"`
	Name          string            `xml:"name"`
	UUID          string            `xml:"uuid,omitempty"`
	Memory        *memoryXML        `xml:"memory"`
	MemoryBacking *memoryBackingXML `xml:"memoryBacking"`
	VCPU          int               `xml:"vcpu,omitempty"`
	SysInfo       []sysInfoXML      `xml:"sysinfo"`
	OS            *osXML            `xml:"os"`
	Features      *featuresXML      `xml:"features"`
	CPU           *cpuXML           `xml:"cpu"`
	Clock         *clockXML         `xml:"clock"`
	OnPoweroff    string            `xml:"on_poweroff,omitempty"`
	OnReboot      string            `xml:"on_reboot,omitempty"`
	OnCrash       string            `xml:"on_crash,omitempty"`
	Devices       devicesXML        `xml:"devices"`
}

type memoryXML struct {
	Unit  string `xml:"unit,attr"`
	Value int    `xml:",chardata"`
}

type memoryBackingXML struct {
	Source *typeAttrXML `xml:"source"`
	Access *modeAttrXML `xml:"access"`
}

type typeAttrXML struct {
	Type string `xml:"type,attr"`
}

type modeAttrXML struct {
	Mode string `xml:"mode,attr"`
}

type sysInfoXML struct {
	Type   string         `xml:"type,attr"`
	System []sysEntryList `xml:"system"`
	// Entries are the fw_cfg files of <sysinfo type='fwcfg'>.
	Entries []fwCfgEntryXML `xml:"entry"`
}

type fwCfgEntryXML struct {
	Name  string `xml:"name,attr"`
	File  string `xml:"file,attr,omitempty"`
	Value string `xml:",chardata"`
}

type sysEntryList struct {
	Entries []sysEntryXML `xml:"entry"`
}

type sysEntryXML struct {
	Name  string `xml:"name,attr"`
	Value string `xml:",chardata"`
}

type osXML struct {
	Type    osTypeXML    `xml:"type"`
	Boot    *bootXML     `xml:"boot"`
	Kernel  string       `xml:"kernel,omitempty"`
	Initrd  string       `xml:"initrd,omitempty"`
	Cmdline string       `xml:"cmdline,omitempty"`
	SMBIOS  *modeAttrXML `xml:"smbios"`
}

type osTypeXML struct {
	Arch    string `xml:"arch,attr,omitempty"`
	Machine string `xml:"machine,attr,omitempty"`
	Value   string `xml:",chardata"`
}

type bootXML struct {
	Dev string `xml:"dev,attr"`
}

type featuresXML struct {
	ACPI *struct{} `xml:"acpi"`
	APIC *struct{} `xml:"apic"`
}

type cpuXML struct {
	Mode  string `xml:"mode,attr"`
	Check string `xml:"check,attr,omitempty"`
}

type clockXML struct {
	Offset string `xml:"offset,attr"`
}

type devicesXML struct {
	Emulator    string          `xml:"emulator,omitempty"`
	Disks       []diskXML       `xml:"disk"`
	Controllers []controllerXML `xml:"controller"`
	Filesystems []filesystemXML `xml:"filesystem"`
	Interfaces  []interfaceXML  `xml:"interface"`
	Hostdevs    []hostdevXML    `xml:"hostdev"`
	Serials     []serialXML     `xml:"serial"`
	RNGs        []rngXML        `xml:"rng"`
	// Extra are the parts' devices (Host.Extra), written as given.
	Extra []extraDeviceXML `xml:",any"`
}

// extraDeviceXML is one device element a part contributes.
type extraDeviceXML struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Inner   []byte     `xml:",innerxml"`
}

type diskXML struct {
	XMLName xml.Name       `xml:"disk"`
	Type    string         `xml:"type,attr"`
	Device  string         `xml:"device,attr"`
	Driver  *diskDriverXML `xml:"driver"`
	Source  *diskSourceXML `xml:"source"`
	// BackingStore is written only for an encrypted backing file.
	BackingStore *backingStoreXML `xml:"backingStore,omitempty"`
	Target       diskTargetXML    `xml:"target"`
	ReadOnly     *struct{}        `xml:"readonly"`
	Serial       string           `xml:"serial,omitempty"`
	Alias        *aliasXML        `xml:"alias"`
	Address      *addressXML      `xml:"address"`
}

type diskDriverXML struct {
	Name string `xml:"name,attr"`
	Type string `xml:"type,attr"`
}

type diskSourceXML struct {
	File       string         `xml:"file,attr,omitempty"`
	Dev        string         `xml:"dev,attr,omitempty"`
	Encryption *encryptionXML `xml:"encryption"`
}

// backingStoreXML is a disk's backing file, named explicitly (with its
// own encryption) and ending the chain (End: an empty <backingStore/>).
type backingStoreXML struct {
	Type   string         `xml:"type,attr,omitempty"`
	Format *typeAttrXML   `xml:"format"`
	Source *diskSourceXML `xml:"source"`
	End    *struct{}      `xml:"backingStore"`
}

type encryptionXML struct {
	Format string    `xml:"format,attr"`
	Secret secretXML `xml:"secret"`
}

type secretXML struct {
	Type string `xml:"type,attr"`
	UUID string `xml:"uuid,attr"`
}

type diskTargetXML struct {
	Dev string `xml:"dev,attr"`
	Bus string `xml:"bus,attr,omitempty"`
}

type aliasXML struct {
	Name string `xml:"name,attr"`
}

// addressXML is a device address: type pci (domain, bus, slot, function),
// drive (controller, bus, target, unit) or usb (bus, port). Values are kept
// as libvirt writes them ("0x04" for PCI, decimal for drive addresses).
type addressXML struct {
	Type          string `xml:"type,attr"`
	Domain        string `xml:"domain,attr,omitempty"`
	Controller    string `xml:"controller,attr,omitempty"`
	Bus           string `xml:"bus,attr,omitempty"`
	Slot          string `xml:"slot,attr,omitempty"`
	Function      string `xml:"function,attr,omitempty"`
	Target        string `xml:"target,attr,omitempty"`
	Unit          string `xml:"unit,attr,omitempty"`
	Port          string `xml:"port,attr,omitempty"`
	Multifunction string `xml:"multifunction,attr,omitempty"`
}

type controllerXML struct {
	XMLName xml.Name    `xml:"controller"`
	Type    string      `xml:"type,attr"`
	Index   *int        `xml:"index,attr"`
	Model   string      `xml:"model,attr,omitempty"`
	Alias   *aliasXML   `xml:"alias"`
	Address *addressXML `xml:"address"`
}

type filesystemXML struct {
	XMLName    xml.Name            `xml:"filesystem"`
	Type       string              `xml:"type,attr"`
	AccessMode string              `xml:"accessmode,attr,omitempty"`
	Driver     *typeAttrXML        `xml:"driver"`
	Source     *filesystemDirXML   `xml:"source"`
	Target     filesystemTargetXML `xml:"target"`
	Alias      *aliasXML           `xml:"alias"`
	Address    *addressXML         `xml:"address"`
}

type filesystemDirXML struct {
	Dir string `xml:"dir,attr"`
}

type filesystemTargetXML struct {
	Dir string `xml:"dir,attr"`
}

type interfaceXML struct {
	XMLName xml.Name            `xml:"interface"`
	Type    string              `xml:"type,attr"`
	MAC     *macXML             `xml:"mac"`
	Source  *interfaceSourceXML `xml:"source"`
	Model   *typeAttrXML        `xml:"model"`
	MTU     *mtuXML             `xml:"mtu"`
	Alias   *aliasXML           `xml:"alias"`
	Address *addressXML         `xml:"address"`
}

type macXML struct {
	Address string `xml:"address,attr"`
}

type interfaceSourceXML struct {
	Network string `xml:"network,attr,omitempty"`
	Bridge  string `xml:"bridge,attr,omitempty"`
}

type mtuXML struct {
	Size int `xml:"size,attr"`
}

type hostdevXML struct {
	XMLName xml.Name         `xml:"hostdev"`
	Mode    string           `xml:"mode,attr"`
	Type    string           `xml:"type,attr"`
	Managed string           `xml:"managed,attr,omitempty"`
	Source  hostdevSourceXML `xml:"source"`
	Alias   *aliasXML        `xml:"alias"`
	Address *addressXML      `xml:"address"`
}

type hostdevSourceXML struct {
	Address hostAddressXML `xml:"address"`
}

// hostAddressXML is a host PCI address in a hostdev's source: libvirt's
// schema (pciaddress) takes no type attribute there.
type hostAddressXML struct {
	Domain   string `xml:"domain,attr"`
	Bus      string `xml:"bus,attr"`
	Slot     string `xml:"slot,attr"`
	Function string `xml:"function,attr"`
}

type serialXML struct {
	Type string     `xml:"type,attr"`
	Log  *serialLog `xml:"log"`
}

type serialLog struct {
	File   string `xml:"file,attr"`
	Append string `xml:"append,attr,omitempty"`
}

type rngXML struct {
	Model   string        `xml:"model,attr"`
	Backend rngBackendXML `xml:"backend"`
}

type rngBackendXML struct {
	Model string `xml:"model,attr"`
	Value string `xml:",chardata"`
}
