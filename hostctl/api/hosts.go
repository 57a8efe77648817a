package api

import (
	"context"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	hostreg "github.com/vmeta/vmeta/hostctl/hosts"
	"github.com/vmeta/vmeta/internal/errkind"
)

// HostService is what the hosts resource needs: the status of every host
// sharing the store, sorted by name (hosts.Registry).
type HostService interface {
	List(ctx context.Context) ([]hostreg.Status, error)
}

// OwnershipService moves or forgets another host's instance: the adopt
// and the forced delete from the store (hostctl/ops).
type OwnershipService interface {
	Adopt(ctx context.Context, name string) (*controller.Instance, error)
	ForceDeleteFromStore(ctx context.Context, name string) ([]string, error)
}

// hosts is /v1/hosts and the ownership calls on one instance
// (POST /v1/instances/{name}/adopt, DELETE …?force_from_store=1). All of
// them are for administrators: hosts are the operator's business.
type hosts struct {
	svc HostService
	own OwnershipService
	errorWriter
}

func (h hosts) routes(r *mux.Router) {
	r.HandleFunc("", h.list).Methods(http.MethodGet)
}

func (h hosts) instanceRoutes(r *mux.Router) {
	r.HandleFunc("/adopt", h.adopt).Methods(http.MethodPost)
	r.HandleFunc("", h.forceDelete).Methods(http.MethodDelete).Queries("force_from_store", "{force}")
}

func (h hosts) admin(w http.ResponseWriter, r *http.Request) bool {
	if principalFrom(r.Context()).Role != types.RoleAdmin {
		h.fail(w, r, errkind.Errorf(errkind.Forbidden, "only an administrator may do this"))
		return false
	}
	return true
}

func (h hosts) list(w http.ResponseWriter, r *http.Request) {
	if !h.admin(w, r) {
		return
	}
	hs, err := h.svc.List(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := make([]types.HostStatus, len(hs))
	for i, s := range hs {
		out[i] = wireHostStatus(s)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h hosts) adopt(w http.ResponseWriter, r *http.Request) {
	if !h.admin(w, r) {
		return
	}
	inst, err := h.own.Adopt(r.Context(), mux.Vars(r)["name"])
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wireInstance(inst))
}

func (h hosts) forceDelete(w http.ResponseWriter, r *http.Request) {
	if !h.admin(w, r) {
		return
	}
	if v := mux.Vars(r)["force"]; v != "1" && v != "true" {
		h.fail(w, r, errkind.Errorf(errkind.Invalid, "force_from_store: %q: must be 1 or true", v))
		return
	}
	left, err := h.own.ForceDeleteFromStore(r.Context(), mux.Vars(r)["name"])
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, types.ForceDeleteResult{Left: left})
}
