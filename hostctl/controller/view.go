package controller

import (
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
)

// Instance is an instance as the controller shows it. The admin API
// answers with it as a types.Instance (hostctl/api converts).
type Instance struct {
	Spec            *model.Instance
	Revision        int64
	DocumentVersion int64
	ConfigDrive     string
	// Host is the host controller that owns the instance.
	Host string
	// State is the domain's state (running, shutoff, paused, ...),
	// "missing" when libvirt has no domain of this name and UUID
	// (deleted behind hostctl's back), "unknown" when libvirtd does not
	// answer; empty without a hypervisor. The state the states part
	// keeps (hostctl/parts/vmstate: shelved_offloaded, rescue) while the
	// instance is shelved or rescued, StateError in ERROR.
	State string
	// Fault says why the instance is in ERROR: a start failed because a
	// share could not be mounted on the host.
	Fault string
	// Devices is the devices list the guest sees at "latest".
	Devices []metadata.Device
	// Transports say which metadata revision each transport carries to
	// the guest (Get only): the metadata service's (types.TransportHTTP)
	// and those of the parts that carry it (the config drive, the
	// firmware entries).
	Transports []part.Transport
	// Warnings name parts of a request that are still under way or that
	// a running guest does not see yet.
	Warnings []string
	// BlockDevices are the block-device records of the disks hostctl
	// created (never a passphrase).
	BlockDevices []encryption.BlockDevice
	// HostDevices are the domain devices the host's parts give the
	// instance (a watchdog; Get only).
	HostDevices []HostDevice
}

// HostDevice is one domain device a host part gives an instance: the
// part's kind and what the device is.
type HostDevice struct {
	Kind   string
	Detail string
}
