package api

import (
	"context"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/internal/errkind"
)

// ShelveService shelves and rescues instances.
type ShelveService interface {
	Shelve(ctx context.Context, name string) (*controller.Instance, error)
	Unshelve(ctx context.Context, name string) (*controller.Instance, error)
	Rescue(ctx context.Context, name string, req types.RescueRequest) (*controller.Instance, error)
	Unrescue(ctx context.Context, name string) (*controller.Instance, error)
}

// shelve is POST /v1/instances/{name}/shelve, /unshelve, /rescue
// (types.RescueRequest) and /unrescue, answered with the instance (its
// state shelved_offloaded or rescue while it is so). An instance in the
// wrong state (shelving a running or shelved one, rescuing a shelved or
// rescued one, unshelving or unrescuing one that is not) is a 409 naming
// its state; a missing rescue image a 404; bad input a 400 naming the
// field.
type shelve struct {
	svc ShelveService
	errorWriter
}

func (h shelve) routes(r *mux.Router) {
	r.HandleFunc("/shelve", h.shelve).Methods(http.MethodPost)
	r.HandleFunc("/unshelve", h.unshelve).Methods(http.MethodPost)
	r.HandleFunc("/rescue", h.rescue).Methods(http.MethodPost)
	r.HandleFunc("/unrescue", h.unrescue).Methods(http.MethodPost)
}

func (h shelve) shelve(w http.ResponseWriter, r *http.Request) {
	h.answer(w, r, h.svc.Shelve)
}

func (h shelve) unshelve(w http.ResponseWriter, r *http.Request) {
	h.answer(w, r, h.svc.Unshelve)
}

func (h shelve) unrescue(w http.ResponseWriter, r *http.Request) {
	h.answer(w, r, h.svc.Unrescue)
}

func (h shelve) rescue(w http.ResponseWriter, r *http.Request) {
	var req types.RescueRequest
	if !h.decode(w, r, &req) {
		return
	}
	h.answer(w, r, func(ctx context.Context, name string) (*controller.Instance, error) {
		if req.Image == "" {
			return nil, errkind.Errorf(errkind.Invalid, "image: required (the rescue image)")
		}
		return h.svc.Rescue(ctx, name, req)
	})
}
