package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/types"
	imagecat "github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/store"
)

// SnapshotService copies an instance's root disk into a new image.
// Snapshot lets encryption_key existing name a secret of the instance's
// project only; SnapshotAnyProject, the administrator's, a secret of any
// project.
type SnapshotService interface {
	Snapshot(ctx context.Context, name string, req types.SnapshotRequest) (imagecat.Image, error)
	SnapshotAnyProject(ctx context.Context, name string, req types.SnapshotRequest) (imagecat.Image, error)
}

// snapshot is POST /v1/instances/{name}/snapshot (types.SnapshotRequest)
// on a stopped instance, answered with the new image (201). The
// specification's createImage is the owner's: a project member snapshots
// its own project's instances (another project's instance does not exist
// to it: 404), with encryption_key same, new, none, or existing naming a
// secret of the instance's project; existing with another project's
// secret is for an administrator (403 to a member). Bad input is a 400
// naming the field; a secret missing or of another project (to the
// administrator: of a project the instance's cannot read), a name taken
// or a running instance a 409.
type snapshot struct {
	svc     SnapshotService
	secrets SecretService // the project of a member's secret_uuid; nil: not served
	errorWriter
}

func (h snapshot) routes(r *mux.Router) {
	r.HandleFunc("/snapshot", h.snapshot).Methods(http.MethodPost)
}

func (h snapshot) snapshot(w http.ResponseWriter, r *http.Request) {
	if !h.member(w, r) {
		return
	}
	var req types.SnapshotRequest
	if !h.decode(w, r, &req) {
		return
	}
	if req.Image == "" {
		h.fail(w, r, errkind.Errorf(errkind.Invalid, "name: required (the new image's name)"))
		return
	}
	name := mux.Vars(r)["name"]
	p := principalFrom(r.Context())
	if p.Role == types.RoleAdmin {
		img, err := h.svc.SnapshotAnyProject(r.Context(), name, req)
		h.created(w, r, img, err)
		return
	}
	if req.EncryptionKey == types.SnapshotKeyExisting && req.SecretUUID != "" {
		if h.secrets == nil {
			h.fail(w, r, errkind.Errorf(errkind.Unsupported, "secret_uuid: this hostctl does not serve secrets: a member cannot snapshot with one"))
			return
		}
		// The same answer for a secret of another project and for none
		// at all: to a member, another project's secret does not exist.
		s, err := h.secrets.Secret(r.Context(), req.SecretUUID)
		switch {
		case errors.Is(err, store.ErrNotFound) || err == nil && s.ProjectID != scopedInstance(r).Spec.ProjectID:
			h.fail(w, r, errkind.Errorf(errkind.Forbidden, "secret_uuid: %q: not a secret of project %q: a member snapshots with its own project's secrets (encryption_key existing with another project's secret is for an administrator)",
				req.SecretUUID, scopedInstance(r).Spec.ProjectID))
			return
		case err != nil && !errors.Is(err, errkind.Unsupported): // no key manager: the snapshot refuses
			h.fail(w, r, err)
			return
		}
	}
	img, err := h.svc.Snapshot(r.Context(), name, req)
	h.created(w, r, img, err)
}

func (h snapshot) created(w http.ResponseWriter, r *http.Request, img imagecat.Image, err error) {
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, wireImage(img))
}
