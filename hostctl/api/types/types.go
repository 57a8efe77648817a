// Package types holds the request and response bodies of hostctl's admin
// API. Clients (the hostctl CLI, tests, other tools) import it without
// linking libvirt, the controller, the store or the key manager: it is a
// leaf that imports nothing of vmeta (test/layout checks it). The
// feature packages own their domain and stored structs; hostctl/api
// converts them to and from these at its edge, so a response body can
// change without changing what is stored.
package types

import (
	"encoding/json"
	"time"
)

// DefaultDiskSize is the size of a disk attached without one.
const DefaultDiskSize = "1G"

// Instance is an instance as the admin API shows it.
type Instance struct {
	Spec            *InstanceSpec `json:"spec"`
	Revision        int64         `json:"revision"`
	DocumentVersion int64         `json:"document_version,omitempty"`
	ConfigDrive     string        `json:"config_drive,omitempty"`
	// Host is the host controller that owns the instance.
	Host string `json:"host,omitempty"`
	// State is the domain's state (running, shutoff, paused, ...),
	// "missing" when libvirt has no domain of this name and UUID
	// (deleted behind hostctl's back), "unknown" when libvirtd does not
	// answer; empty without a hypervisor. "shelved_offloaded" and
	// "rescue" while the instance is shelved or rescued.
	State string `json:"state,omitempty"`
	// Fault says why the instance is in ERROR (state "error"): a start
	// failed because a share could not be mounted on the host. Only a
	// hard reboot (POST .../reboot {"type":"HARD"}) starts it again.
	Fault string `json:"fault,omitempty"`
	// Devices is the devices list the guest sees at "latest".
	Devices []GuestDevice `json:"devices"`
	// Transports say which metadata revision each transport carries to
	// the guest (instance show; empty in lists).
	Transports []Transport `json:"transports,omitempty"`
	// Warnings name parts of a request that are still under way (a live
	// detach the guest has not completed yet) or that a running guest
	// does not see yet (a virtio config drive cannot change media).
	Warnings []string `json:"warnings,omitempty"`
	// BlockDevices are the block-device records of the disks hostctl
	// created (encryption as created and verified; never a passphrase).
	BlockDevices []BlockDevice `json:"block_devices,omitempty"`
	// HostDevices are the domain devices the host's parts give the
	// instance (a watchdog), for `instance show`.
	HostDevices []HostDevice `json:"host_devices,omitempty"`
}

// HostDevice is one domain device a host part gives an instance.
type HostDevice struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

// The transports that carry an instance's metadata to its guest.
const (
	TransportHTTP     = "metadata service"
	TransportDrive    = "config drive"
	TransportFirmware = "firmware"
)

// Transport is one transport of an instance's metadata and the revision
// it carries.
type Transport struct {
	Name string `json:"name"`
	// Revision is the metadata revision the guest can read there now (0:
	// none).
	Revision int64 `json:"revision"`
	// NextBoot is the revision the guest reads there after its next
	// start, where that differs in kind (firmware, a virtio drive).
	NextBoot int64 `json:"next_boot,omitempty"`
	// Note says more: the medium, why there is none, that it is fixed
	// while the guest runs.
	Note string `json:"note,omitempty"`
}

// HostStatus is one host controller sharing the store, as its heartbeat
// shows it.
type HostStatus struct {
	Host      string    `json:"host"`
	Version   string    `json:"version"`
	Started   time.Time `json:"started"`
	LastSeen  time.Time `json:"last_seen"`
	Instances int       `json:"instances"`
	// AgeSeconds is the time since LastSeen, by the answering host's clock.
	AgeSeconds float64 `json:"age_seconds"`
	// Down: silent for longer than the configured time, or Stopped.
	Down    bool `json:"down"`
	Stopped bool `json:"stopped,omitempty"`
	// Traits are the host's capability traits, as probed
	// (COMPUTE_EPHEMERAL_ENCRYPTION, COMPUTE_EPHEMERAL_ENCRYPTION_LUKS, ...).
	Traits []string `json:"traits,omitempty"`
}

// ForceDeleteResult answers DELETE /v1/instances/{name}?force_from_store=1:
// what the record's host still holds, which this host could not clean.
type ForceDeleteResult struct {
	Left []string `json:"left"`
}

// DiskRequest asks for a new, blank disk to be created and attached.
type DiskRequest struct {
	// Tag is the device role tag the guest sees (unique among the disks).
	Tag string `json:"tag,omitempty"`
	// Target is the target name (vdX, sdX); the first one the domain
	// leaves free on Bus when empty.
	Target string `json:"target,omitempty"`
	// Bus is virtio (default), scsi, sata or usb.
	Bus string `json:"bus,omitempty"`
	// Size in qemu-img syntax; DefaultDiskSize when empty.
	Size   string `json:"size,omitempty"`
	Serial string `json:"serial,omitempty"`
	// Encrypted asks for the disk to be created encrypted (LUKS, its own
	// secret); the guest is told so once hostctl made and checked it.
	// Omitted, the instance's flavor and image decide; an explicit false
	// under an encrypting flavor or image is a conflict (409), as in a
	// spec.
	Encrypted *bool `json:"encrypted,omitempty"`
	Affect
}

// NICRequest asks for a NIC to be attached.
type NICRequest struct {
	Tag string `json:"tag,omitempty"`
	// MAC is generated (52:54:00:xx:xx:xx) when empty.
	MAC string `json:"mac,omitempty"`
	// Network is the libvirt network; the default one when empty.
	Network string `json:"network,omitempty"`
	Affect
}

// DetachRequest names the device to detach: by Tag, or by Target (a
// disk) or MAC (a NIC).
type DetachRequest struct {
	Tag    string `json:"tag,omitempty"`
	Target string `json:"target,omitempty"`
	MAC    string `json:"mac,omitempty"`
	Affect
}

// Affect says which configuration of the domain a device change applies
// to. Neither set means the persistent configuration, and the running one
// too when the domain runs. The metadata follows the running configuration
// of a running domain, so a change to the persistent configuration alone
// is refused while the domain runs.
type Affect struct {
	Live   bool `json:"live,omitempty"`
	Config bool `json:"config,omitempty"`
}

// DefaultStopTimeout is how long a stop waits for the guest to shut down
// before the domain is powered off, when the request names no timeout.
const DefaultStopTimeout = 30 * time.Second

// StopRequest is the body of POST /v1/instances/{name}/stop.
type StopRequest struct {
	// TimeoutSeconds bounds the graceful shutdown before the domain is
	// powered off; the controller's default when 0.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
}

// Reboot types of RebootRequest (Nova's).
const (
	RebootHard = "HARD"
	RebootSoft = "SOFT"
)

// RebootRequest is the body of POST /v1/instances/{name}/reboot.
type RebootRequest struct {
	// Type is HARD (power off if running, then start: it retries the
	// share mounts and clears ERROR) or SOFT (libvirt's reboot of a
	// running instance: the guest reboots, the domain stays).
	Type string `json:"type"`
}

// Error is the body of every error response.
type Error struct {
	Message string       `json:"error"`
	Fields  []FieldError `json:"fields,omitempty"`
	// Summary is, with Fields, the message without their list: what was
	// refused ("create flavor f1: invalid flavor"), the heading under
	// which a client lists the fields.
	Summary string `json:"summary,omitempty"`
	// Status is the HTTP status the error came with (set by clients; not
	// part of the body).
	Status int `json:"-"`
}

// FieldError is one invalid field of a spec.
type FieldError struct {
	Field string `json:"field"`
	Value any    `json:"value,omitempty"`
	Rule  string `json:"rule"`
}

func (e *Error) Error() string { return e.Message }

// StatusCode is the HTTP status the error came with (client side).
func (e *Error) StatusCode() int { return e.Status }

// Roles of the admin API.
const (
	// RoleAdmin sees and changes every instance.
	RoleAdmin = "admin"
	// RoleMember sees and changes only the instances of its project; to a
	// member, another project's instance does not exist (404).
	RoleMember = "member"
)

// Principal is who is calling the admin API (the body of GET /v1/whoami).
type Principal struct {
	Name    string `json:"name"`
	Role    string `json:"role"`
	Project string `json:"project,omitempty"`
}

// Event is one entry of an audit stream (GET /v1/events/{stream}).
type Event struct {
	// ID is the event's position in its stream: pass it as ?after= to
	// read what follows.
	ID   string    `json:"id"`
	Time time.Time `json:"time"`
	Host string    `json:"host"`
	Type string    `json:"type"`
	// Payload is the event's body, as its emitter wrote it.
	Payload json.RawMessage `json:"payload,omitempty"`
}
