// Package model holds vmeta's instance model — instances, disks, NICs,
// shares and PCI devices as an operator writes them in an instance spec —
// and the rules a spec must satisfy before anything is stored or published.
//
// Structure (field names, types, enums, patterns) is checked by the
// instance-spec JSON Schema in package schema; the cross-field rules that a
// schema cannot express (tag uniqueness per device type, address/bus
// agreement, duplicate MACs and addresses) live in Validate.
package model

import (
	"encoding/json"
	"fmt"
)

// Instance is one guest as the operator describes it. The JSON names are the
// spec's field names (YAML specs are converted to JSON first).
type Instance struct {
	// Name identifies the instance on this host (libvirt domain name later).
	Name string `json:"name"`
	// UUID is the instance id seen by the guest (meta_data.json "uuid").
	// Generated on first apply when empty.
	UUID             string `json:"uuid,omitempty"`
	Hostname         string `json:"hostname,omitempty"`
	ProjectID        string `json:"project_id,omitempty"`
	AvailabilityZone string `json:"availability_zone,omitempty"`
	LaunchIndex      int    `json:"launch_index,omitempty"`
	// Flavor is reported as the EC2 instance-type.
	Flavor string `json:"flavor,omitempty"`
	// Image is reported as the EC2 ami-id.
	Image string `json:"image,omitempty"`
	// VCPUs and MemoryMiB size the guest (the host's defaults when 0); a
	// flavor sets them.
	VCPUs     int `json:"vcpus,omitempty"`
	MemoryMiB int `json:"memory_mib,omitempty"`

	// Addresses are the source addresses (IPv4 or IPv6) the guest uses to
	// reach the metadata service; they identify the caller.
	Addresses []string `json:"addresses,omitempty"`

	Meta       map[string]string `json:"meta,omitempty"`
	PublicKeys []PublicKey       `json:"public_keys,omitempty"`
	// UserData is passed to the guest unchanged (cloud-config, script, ...).
	UserData string `json:"user_data,omitempty"`
	// VendorData is the static vendor data (vendor_data.json, and the
	// "static" key of vendor_data2.json).
	VendorData map[string]any `json:"vendor_data,omitempty"`
	// Files are injected files; like Nova they appear only on the config drive.
	Files []File `json:"files,omitempty"`
	// DedicatedCPUs are host CPU ids pinned to the guest (dedicated_cpus).
	DedicatedCPUs []int `json:"dedicated_cpus,omitempty"`
	// ConfigDrive says whether the guest gets a config drive (a cdrom with
	// the metadata); nil means yes. Like Nova's --config-drive it is per
	// instance; without one the guest reads the metadata service only.
	// WantsConfigDrive reads it.
	ConfigDrive *bool `json:"config_drive,omitempty"`

	Disks      []Disk      `json:"disks,omitempty"`
	NICs       []NIC       `json:"nics,omitempty"`
	Shares     []Share     `json:"shares,omitempty"`
	PCIDevices []PCIDevice `json:"pci_devices,omitempty"`
	// PCIAliases request passthrough devices from the host's device
	// inventory (hostctl/devices) by alias, Nova's pci_alias; hostctl
	// claims them and adds them to PCIDevices (with Alias set).
	PCIAliases []PCIAlias `json:"pci_aliases,omitempty"`
}

// PCIAlias requests Count devices of the host's device_spec alias Name.
type PCIAlias struct {
	Name string `json:"name"`
	// Count is how many (default 1).
	Count int `json:"count,omitempty"`
	// Tag, when set, is the role tag of the claimed device in the guest's
	// device metadata (a pci device with its guest address). A tag names
	// one device, so it requires count 1.
	Tag string `json:"tag,omitempty"`
}

// WantsConfigDrive reports whether the instance gets a config drive
// (config_drive is true or absent).
func (in *Instance) WantsConfigDrive() bool { return in.ConfigDrive == nil || *in.ConfigDrive }

// PublicKey is an SSH key pair's public half.
type PublicKey struct {
	Name string `json:"name"`
	Type string `json:"type,omitempty"` // "ssh" (default) or "x509"
	Data string `json:"data"`
}

// File is a file injected through the config drive.
type File struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// Disk buses an instance spec accepts (the libvirt target bus).
const (
	DiskBusVirtio = "virtio"
	DiskBusSCSI   = "scsi"
	DiskBusSATA   = "sata"
	DiskBusIDE    = "ide"
	DiskBusUSB    = "usb"
)

// Disk kinds (Disk.Kind): Nova's local disks of an instance, in the
// instance directory as Nova's libvirt driver names them.
const (
	// DiskKindRoot is the disk made from the image: file "disk".
	DiskKindRoot = "root"
	// DiskKindEphemeral is a flavor's blank ephemeral disk, formatted
	// and labelled ephemeral0 as Nova's default_ephemeral_format does:
	// file "disk.eph0" (EC2 block-device-mapping ephemeral0).
	DiskKindEphemeral = "ephemeral"
	// DiskKindSwap is a flavor's swap disk, made with mkswap: file
	// "disk.swap" (EC2 block-device-mapping swap).
	DiskKindSwap = "swap"
)

// Disk is a block device of the instance.
type Disk struct {
	// Name is the guest target name libvirt uses (vda, sdb, hdc).
	Name string `json:"name"`
	// Bus is the target bus: virtio, scsi, sata, ide or usb.
	Bus string `json:"bus,omitempty"`
	// Kind is what the disk is for, as Nova lays out an instance's local
	// disks (DiskKindRoot, DiskKindEphemeral, DiskKindSwap); empty for
	// any other disk (a volume to the guest: EC2 ebsN). A flavor adds its
	// disks with their kind; a spec disk with a kind gives the flavor's
	// disk of that kind its name, bus, tag and serial.
	Kind string `json:"kind,omitempty"`
	// Address is the device address when known (from the spec in
	// hypervisor-less mode; from the live domain otherwise). Its form
	// depends on the bus; see AddressBus.
	Address string `json:"address,omitempty"`
	Serial  string `json:"serial,omitempty"`
	Tag     string `json:"tag,omitempty"`
	// Size of an ephemeral disk, e.g. "10G" (qemu-img syntax).
	Size string `json:"size,omitempty"`
	// Encrypted marks a disk encrypted at rest (reported to the guest).
	Encrypted bool `json:"encrypted,omitempty"`
	// EncryptionFormat asks hostctl to create the disk encrypted at rest in
	// this format ("luks"; empty: the host's default when Encrypted is set).
	// It is a request: what the guest is told comes only from what hostctl
	// created and verified.
	EncryptionFormat string `json:"encryption_format,omitempty"`
	// Unencrypted records that the spec said `encrypted: false` itself
	// (ParseSpec sets it; never stored): an explicit request an encrypting
	// flavor or image must not silently override (a conflict instead).
	Unencrypted bool `json:"-"`
}

// NIC is a network interface of the instance.
type NIC struct {
	MAC string `json:"mac"`
	// Bus is pci (default) or none.
	Bus     string `json:"bus,omitempty"`
	Address string `json:"address,omitempty"`
	Tag     string `json:"tag,omitempty"`
	// Network names the host network; reported as network_id.
	Network   string `json:"network,omitempty"`
	VLAN      *int   `json:"vlan,omitempty"`
	VFTrusted bool   `json:"vf_trusted,omitempty"`
	MTU       int    `json:"mtu,omitempty"`
	// IPs configure the guest's addresses in network_data.json. Empty
	// means DHCP (ipv4_dhcp).
	IPs []IPConfig `json:"ips,omitempty"`
}

// IPConfig is one static address of a NIC.
type IPConfig struct {
	// Address in CIDR form, e.g. 10.0.0.5/24 or 2001:db8::5/64.
	Address string   `json:"address"`
	Gateway string   `json:"gateway,omitempty"`
	DNS     []string `json:"dns,omitempty"`
}

// Share is a host directory or NFS export attached through virtiofs.
type Share struct {
	// ShareID is the share's UUID.
	ShareID string `json:"share_id"`
	// Tag is the virtiofs mount tag; defaults to ShareID, as in Nova.
	Tag string `json:"tag,omitempty"`
	// Source is the host directory or NFS export (host:/path).
	Source string `json:"source,omitempty"`
}

// PCIDevice is a passthrough device.
type PCIDevice struct {
	// Address is the host PCI address (dddd:bb:ss.f).
	Address    string `json:"address"`
	OneTimeUse bool   `json:"one_time_use,omitempty"`
	// Alias is set by hostctl on a device it claimed for one of the
	// instance's pci_aliases; on apply such entries are dropped and
	// claimed again (the inventory says which device the instance holds).
	Alias string `json:"alias,omitempty"`
	// Tag, when set, lists the device in the guest's device metadata as a
	// pci device with its guest address (untagged ones are not listed).
	// For a device claimed for pci_aliases it is the alias request's tag.
	Tag string `json:"tag,omitempty"`
	// GuestAddress is the PCI address the guest sees the device at
	// (dddd:bb:ss.f): given in the spec, or read back from the domain XML
	// (the hostdev's guest-side <address>) with a hypervisor.
	GuestAddress string `json:"guest_address,omitempty"`
}

// EffectiveTag returns the effective virtiofs tag of a share.
func (s Share) EffectiveTag() string {
	if s.Tag != "" {
		return s.Tag
	}
	return s.ShareID
}

// Clone deep-copies in through its JSON form, as a stored record would
// round-trip it: fields that are never stored (Disk.Unencrypted, which
// only a parsed spec carries) are not copied.
func (in *Instance) Clone() *Instance {
	b, err := json.Marshal(in)
	if err != nil {
		panic(fmt.Sprintf("clone instance %s: %v", in.Name, err))
	}
	var out Instance
	if err := json.Unmarshal(b, &out); err != nil {
		panic(fmt.Sprintf("clone instance %s: %v", in.Name, err))
	}
	return &out
}
