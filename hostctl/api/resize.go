package api

import (
	"context"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/internal/errkind"
)

// ResizeService changes an instance's flavor or image.
type ResizeService interface {
	Resize(ctx context.Context, name, flavor string) (*controller.Instance, error)
	Rebuild(ctx context.Context, name, image string) (*controller.Instance, error)
}

// resize is POST /v1/instances/{name}/resize (types.ResizeRequest) and
// /rebuild (types.RebuildRequest), on a stopped instance. A flavor or an
// image whose ephemeral encryption settings differ from the instance's
// is refused with 409 naming both.
type resize struct {
	svc ResizeService
	errorWriter
}

func (h resize) routes(r *mux.Router) {
	r.HandleFunc("/resize", h.resize).Methods(http.MethodPost)
	r.HandleFunc("/rebuild", h.rebuild).Methods(http.MethodPost)
}

func (h resize) resize(w http.ResponseWriter, r *http.Request) {
	var req types.ResizeRequest
	if !h.decode(w, r, &req) {
		return
	}
	h.answer(w, r, func(ctx context.Context, name string) (*controller.Instance, error) {
		if req.Flavor == "" {
			return nil, errkind.Errorf(errkind.Invalid, "flavor: required")
		}
		return h.svc.Resize(ctx, name, req.Flavor)
	})
}

func (h resize) rebuild(w http.ResponseWriter, r *http.Request) {
	var req types.RebuildRequest
	if !h.decode(w, r, &req) {
		return
	}
	h.answer(w, r, func(ctx context.Context, name string) (*controller.Instance, error) {
		if req.Image == "" {
			return nil, errkind.Errorf(errkind.Invalid, "image: required")
		}
		return h.svc.Rebuild(ctx, name, req.Image)
	})
}
