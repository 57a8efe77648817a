package api

import (
	"context"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/types"
	flavorreg "github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/internal/errkind"
)

// FlavorService is what the flavors resource needs: the flavor registry
// and the in-use check of a delete.
type FlavorService interface {
	CreateFlavor(ctx context.Context, f flavorreg.Flavor) (flavorreg.Flavor, error)
	Flavor(ctx context.Context, name string) (flavorreg.Flavor, error)
	Flavors(ctx context.Context) ([]flavorreg.Flavor, error)
	DeleteFlavor(ctx context.Context, name string) error
}

// flavors is /v1/flavors: every caller lists and shows them (members
// choose among them); only an administrator creates and deletes them.
//
//	GET    /v1/flavors          list
//	POST   /v1/flavors          create (flavorreg.Flavor; 201)
//	GET    /v1/flavors/{flavor} show
//	DELETE /v1/flavors/{flavor} delete (409 naming the instances using it)
type flavors struct {
	svc FlavorService
	errorWriter
}

func (h flavors) routes(r *mux.Router) {
	r.HandleFunc("", h.list).Methods(http.MethodGet)
	r.HandleFunc("", h.create).Methods(http.MethodPost)
	r.HandleFunc("/{flavor}", h.get).Methods(http.MethodGet)
	r.HandleFunc("/{flavor}", h.delete).Methods(http.MethodDelete)
}

// adminOnly answers 403 to a caller that is not an administrator.
func (e errorWriter) adminOnly(w http.ResponseWriter, r *http.Request) bool {
	if principalFrom(r.Context()).Role != types.RoleAdmin {
		e.fail(w, r, errkind.Errorf(errkind.Forbidden, "only an administrator may do this"))
		return false
	}
	return true
}

// member answers 403 to a caller with no role.
func (e errorWriter) member(w http.ResponseWriter, r *http.Request) bool {
	if p := principalFrom(r.Context()); p.Role != types.RoleAdmin && p.Role != types.RoleMember {
		e.fail(w, r, errkind.Errorf(errkind.Forbidden, "not allowed"))
		return false
	}
	return true
}

func (h flavors) list(w http.ResponseWriter, r *http.Request) {
	if !h.member(w, r) {
		return
	}
	fs, err := h.svc.Flavors(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wireFlavors(fs))
}

func (h flavors) create(w http.ResponseWriter, r *http.Request) {
	if !h.adminOnly(w, r) {
		return
	}
	var f types.Flavor
	if !h.decode(w, r, &f) {
		return
	}
	out, err := h.svc.CreateFlavor(r.Context(), domainFlavor(f))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, wireFlavor(out))
}

func (h flavors) get(w http.ResponseWriter, r *http.Request) {
	if !h.member(w, r) {
		return
	}
	f, err := h.svc.Flavor(r.Context(), mux.Vars(r)["flavor"])
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wireFlavor(f))
}

func (h flavors) delete(w http.ResponseWriter, r *http.Request) {
	if !h.adminOnly(w, r) {
		return
	}
	if err := h.svc.DeleteFlavor(r.Context(), mux.Vars(r)["flavor"]); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
