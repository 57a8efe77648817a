package api

import (
	"context"
	"io"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/model"
)

// InstanceService is what the instances resource needs: the instance
// records.
type InstanceService interface {
	ApplyInstance(ctx context.Context, in *model.Instance) (*controller.Instance, error)
	Get(ctx context.Context, name string) (*controller.Instance, error)
	List(ctx context.Context) ([]*controller.Instance, error)
	ListAll(ctx context.Context) ([]*controller.Instance, error)
	Delete(ctx context.Context, name string) error
}

// maxSpecBody bounds a request body (specs are at most model.MaxSpecSize).
const maxSpecBody = model.MaxSpecSize + 1

// instances is the /v1/instances resource.
type instances struct {
	svc InstanceService
	errorWriter
}

// routes adds the collection's routes to its subrouter.
func (h instances) routes(r *mux.Router) {
	r.HandleFunc("", h.list).Methods(http.MethodGet)
	r.HandleFunc("", h.apply).Methods(http.MethodPost)
}

// instanceRoutes adds one instance's routes to the project-scoped
// /v1/instances/{name} subrouter.
func (h instances) instanceRoutes(r *mux.Router) {
	r.HandleFunc("", h.get).Methods(http.MethodGet)
	r.HandleFunc("", h.delete).Methods(http.MethodDelete)
}

func (h instances) list(w http.ResponseWriter, r *http.Request) {
	list := h.svc.List
	switch v := r.URL.Query().Get("all_hosts"); v {
	case "":
	case "1", "true":
		list = h.svc.ListAll
	default:
		h.fail(w, r, errkind.Errorf(errkind.Invalid, "all_hosts: %q: must be 1 or true", v))
		return
	}
	insts, err := list(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	p := principalFrom(r.Context())
	visible := make([]*controller.Instance, 0, len(insts))
	for _, in := range insts {
		if sees(p, in.Spec.ProjectID) {
			visible = append(visible, in)
		}
	}
	writeJSON(w, http.StatusOK, wireInstances(visible))
}

func (h instances) apply(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSpecBody))
	if err != nil {
		h.fail(w, r, errkind.Errorf(errkind.TooLarge, "read spec: %v", err))
		return
	}
	in, err := model.ParseSpec(body)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if p := principalFrom(r.Context()); p.Role != types.RoleAdmin {
		// A member applies only within its project; an omitted project_id
		// means its own.
		switch {
		case p.Role != types.RoleMember:
			h.fail(w, r, errkind.Errorf(errkind.Forbidden, "not allowed"))
			return
		case in.ProjectID == "":
			in.ProjectID = p.Project
		case in.ProjectID != p.Project:
			h.fail(w, r, errkind.Errorf(errkind.Forbidden, "project_id: %q: a member of project %q may apply only its own project's instances", in.ProjectID, p.Project))
			return
		}
		if old, err := h.svc.Get(r.Context(), in.Name); err == nil && !sees(p, old.Spec.ProjectID) {
			h.fail(w, r, errkind.Errorf(errkind.Conflict, "name: %q: already in use", in.Name))
			return
		}
	}
	inst, err := h.svc.ApplyInstance(r.Context(), in)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wireInstance(inst))
}

func (h instances) get(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, wireInstance(scopedInstance(r)))
}

func (h instances) delete(w http.ResponseWriter, r *http.Request) {
	if err := h.svc.Delete(r.Context(), mux.Vars(r)["name"]); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
