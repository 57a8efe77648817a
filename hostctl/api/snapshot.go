package api

import (
	"context"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/errkind"
)

// SnapshotService copies an instance's root disk into a new image.
type SnapshotService interface {
	Snapshot(ctx context.Context, name string, req types.SnapshotRequest) (types.Image, error)
}

// snapshot is POST /v1/instances/{name}/snapshot (types.SnapshotRequest)
// on a stopped instance, answered with the new image (201). Only an
// administrator makes images (as only one imports them). Bad input is a
// 400 naming the field; a secret of another project, a name taken or a
// running instance a 409.
type snapshot struct {
	svc SnapshotService
	errorWriter
}

func (h snapshot) routes(r *mux.Router) {
	r.HandleFunc("/snapshot", h.snapshot).Methods(http.MethodPost)
}

func (h snapshot) snapshot(w http.ResponseWriter, r *http.Request) {
	if !h.adminOnly(w, r) {
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
	img, err := h.svc.Snapshot(r.Context(), mux.Vars(r)["name"], req)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, img)
}
