package types

import "time"

// Share protocols of the share registry.
const (
	// ShareProtoLocal exports a host directory under the share root.
	ShareProtoLocal = "local"
	// ShareProtoNFS exports an NFS export (host:/path, [v6]:/path) that
	// hostctl mounts on the host while an instance using it runs.
	ShareProtoNFS = "nfs"
)

// Share mapping statuses (Nova's ShareMappingStatus).
const (
	ShareAttaching = "attaching"
	ShareInactive  = "inactive"
	ShareActive    = "active"
	ShareDetaching = "detaching"
	ShareError     = "error"
)

// Share is one share of the registry (GET /v1/shares/{id}).
type Share struct {
	ID        string `json:"id"`
	Name      string `json:"name,omitempty"`
	ProjectID string `json:"project_id"`
	Proto     string `json:"share_proto"`
	// ExportLocation is the host directory or NFS export; only
	// administrators see it.
	ExportLocation string `json:"export_location,omitempty"`
	// Locked is set while the share is mapped to an instance (on any
	// host): it cannot be deleted then. LockedBy lists those instances
	// (UUIDs; administrators only).
	Locked    bool      `json:"locked"`
	LockedBy  []string  `json:"locked_by,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// ShareCreateRequest is the body of POST /v1/shares.
type ShareCreateRequest struct {
	// ID is the share's UUID; generated when empty.
	ID             string `json:"id,omitempty"`
	Name           string `json:"name,omitempty"`
	ProjectID      string `json:"project_id"`
	Proto          string `json:"share_proto"`
	ExportLocation string `json:"export_location"`
}

// ShareMapping is one share attached to a server, as Nova's server
// shares API shows it. ExportLocation and the fields after it are for
// administrators only.
type ShareMapping struct {
	ShareID        string `json:"share_id"`
	Status         string `json:"status"`
	Tag            string `json:"tag"`
	ExportLocation string `json:"export_location,omitempty"`
	InstanceUUID   string `json:"instance_uuid,omitempty"`
	Host           string `json:"host,omitempty"`
	// Error says why the mapping is in status error (admins only).
	Error string `json:"error,omitempty"`
}

// ServerShareAttach is the "share" of POST /v1/servers/{id}/shares.
type ServerShareAttach struct {
	ShareID string `json:"share_id"`
	// Tag is the virtiofs mount tag; the share ID when empty.
	Tag string `json:"tag,omitempty"`
	// Live hot-plugs the share into a running server (?live=1, a vmeta
	// extension: the specification attaches to SHUTOFF servers only).
	Live bool `json:"-"`
}

// ServerShareRequest is the body of POST /v1/servers/{id}/shares.
type ServerShareRequest struct {
	Share ServerShareAttach `json:"share"`
}

// ServerShareBody is the body of one mapping: {"share": {...}}.
type ServerShareBody struct {
	Share ShareMapping `json:"share"`
}

// ServerSharesBody is the body of GET /v1/servers/{id}/shares.
type ServerSharesBody struct {
	Shares []ShareMapping `json:"shares"`
}

// ShareBody is {"share": {...}} of the registry.
type ShareBody struct {
	Share Share `json:"share"`
}

// SharesBody is {"shares": [...]} of the registry.
type SharesBody struct {
	Shares []Share `json:"shares"`
}

// CephAuthRequest is POST /v1/shares/ceph-auth (administrators): the
// admin keyring hostctl manages this host's CephX client with, and the
// monitors. The keyring is never logged nor stored in the clear.
type CephAuthRequest struct {
	AdminKeyring string `json:"admin_keyring"`
	Mons         string `json:"mons"`
}

// CephAuthResult answers a CephAuthRequest.
type CephAuthResult struct {
	CephVersion string `json:"ceph_version"`
	// Client is the host's newest CephX client (client.vmeta-HOST.GEN).
	Client string `json:"client"`
}
