// Package shares is vmeta's shared-filesystem service, made small and
// real: a registry of shares (a host directory under the share root, or
// an NFS export hostctl mounts on the host), the mappings of shares to
// instances with Nova's states (attaching, inactive, active, detaching,
// error), the lock that keeps a mapped share from being deleted, host
// mounts reference-counted per host, and the reconciler that cleans up
// after instances deleted while hostctl was away.
//
// Everything lives in store records (store.Records), so the lock and the
// states hold across hosts sharing one Redis:
//
//	share/<share-id>                          the share, with its holders (the lock)
//	share-mapping/<instance-uuid>/<share-id>  one mapping and its status
//
// Every state change is one record write with a version check: of two
// hostctl processes moving the same mapping, or one attaching a share
// while another deletes it, exactly one wins and the other is told so.
//
// A share reaches the guest through the instance's spec: a mapped share
// is merged into the spec's shares on every apply (the Service is the
// controller core's shares part, hostctl/part: part.go), so the
// controller defines its virtiofs <filesystem> (with shared
// memory) and publishes it in the metadata, which vmeta-agent mounts.
//
// export_location is admin-only: it is never logged, never put in an
// event, and never shown to a project member.
package shares

import (
	"fmt"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/errkind"
)

// ErrForbidden: the caller's project does not own the share (403).
var ErrForbidden = errkind.New(errkind.Forbidden, "forbidden")

// ErrOtherHost: the server lives on another host, whose share service
// attaches and detaches its shares (409, as the controller's
// ErrOtherHost).
var ErrOtherHost = errkind.New(errkind.Conflict, "another host's instance")

// Key prefixes of the share records.
const (
	sharePrefix   = "share/"
	mappingPrefix = "share-mapping/"
)

func shareKey(id string) string { return sharePrefix + id }

func mappingKey(instance, share string) string {
	return mappingPrefix + instance + "/" + share
}

// Holder is an instance holding a share's lock (mapped to it).
type Holder struct {
	Instance string `json:"instance_uuid"`
	Name     string `json:"instance_name,omitempty"`
	Host     string `json:"host,omitempty"`
}

// Share is a share of the registry as stored.
type Share struct {
	ID      string    `json:"id"`
	Name    string    `json:"name,omitempty"`
	Project string    `json:"project_id"`
	Proto   string    `json:"share_proto"`
	Export  string    `json:"export_location"`
	Created time.Time `json:"created_at"`
	// Holders are the instances the share is mapped to: the lock. The
	// share is "granted" (its access policy in place) while there is one.
	Holders []Holder `json:"holders,omitempty"`

	version int64
}

// View is the share as the API shows it to a caller (export location for
// admins only).
func (s Share) View(admin bool) types.Share {
	out := types.Share{ID: s.ID, Name: s.Name, ProjectID: s.Project, Proto: s.Proto, Locked: len(s.Holders) > 0, CreatedAt: s.Created}
	if admin {
		out.ExportLocation = s.Export
		for _, h := range s.Holders {
			out.LockedBy = append(out.LockedBy, h.Instance)
		}
	}
	return out
}

// Mapping is one share attached to one instance, as stored.
type Mapping struct {
	Instance     string    `json:"instance_uuid"`
	InstanceName string    `json:"instance_name"`
	Host         string    `json:"host,omitempty"`
	Project      string    `json:"project_id,omitempty"`
	ShareID      string    `json:"share_id"`
	Tag          string    `json:"tag"`
	Status       string    `json:"status"`
	Proto        string    `json:"share_proto"`
	Export       string    `json:"export_location"`
	Error        string    `json:"error,omitempty"`
	Updated      time.Time `json:"updated_at"`

	version int64
}

// View is the mapping as the API shows it to a caller.
func (m Mapping) View(admin bool) types.ShareMapping {
	out := types.ShareMapping{ShareID: m.ShareID, Status: m.Status, Tag: m.Tag}
	if admin {
		out.ExportLocation, out.InstanceUUID, out.Host, out.Error = m.Export, m.Instance, m.Host, m.Error
	}
	return out
}

// EventPayload is what share events carry: the specification's
// admin-visible payload without the export location.
type EventPayload struct {
	Instance string `json:"instance_uuid"`
	ShareID  string `json:"share_id"`
	Status   string `json:"status"`
	Tag      string `json:"tag"`
}

func (m Mapping) event() EventPayload {
	return EventPayload{Instance: m.Instance, ShareID: m.ShareID, Status: m.Status, Tag: m.Tag}
}

func (m Mapping) String() string {
	return fmt.Sprintf("share %s on instance %s", m.ShareID, m.InstanceName)
}
