package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/store"
)

// SecretService is what the secrets resource needs: the key manager's
// secrets, as metadata (a passphrase never leaves the daemon).
type SecretService interface {
	CreateSecret(ctx context.Context, req types.SecretRequest) (*types.Secret, error)
	Secrets(ctx context.Context, project string) ([]types.Secret, error)
	Secret(ctx context.Context, uuid string) (*types.Secret, error)
	DeleteSecret(ctx context.Context, uuid string) error
}

// secrets is /v1/secrets:
//
//	GET    /v1/secrets          list (a member: its project's)
//	POST   /v1/secrets          create (types.SecretRequest); 201
//	GET    /v1/secrets/{uuid}   show
//	DELETE /v1/secrets/{uuid}   delete (409 while a disk uses it); 204
//
// To a member another project's secret does not exist (404).
type secrets struct {
	svc SecretService
	errorWriter
}

func (h secrets) routes(r *mux.Router) {
	r.HandleFunc("", h.list).Methods(http.MethodGet)
	r.HandleFunc("", h.create).Methods(http.MethodPost)
	r.HandleFunc("/{uuid}", h.get).Methods(http.MethodGet)
	r.HandleFunc("/{uuid}", h.delete).Methods(http.MethodDelete)
}

func (h secrets) list(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	project := r.URL.Query().Get("project")
	if p.Role != types.RoleAdmin {
		if project != "" && project != p.Project {
			h.fail(w, r, errkind.Errorf(errkind.Forbidden, "project %q: a member lists its own project's secrets only", project))
			return
		}
		project = p.Project
		if project == "" {
			writeJSON(w, http.StatusOK, []types.Secret{})
			return
		}
	}
	ss, err := h.svc.Secrets(r.Context(), project)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ss)
}

func (h secrets) create(w http.ResponseWriter, r *http.Request) {
	var req types.SecretRequest
	if !h.decode(w, r, &req) {
		return
	}
	p := principalFrom(r.Context())
	switch {
	case p.Role == types.RoleAdmin:
		if req.ProjectID == "" {
			h.fail(w, r, errkind.Errorf(errkind.Invalid, "project_id: required (an administrator names the project that owns the secret)"))
			return
		}
	case p.Role == types.RoleMember && p.Project != "":
		if req.ProjectID == "" {
			req.ProjectID = p.Project
		}
		if req.ProjectID != p.Project {
			h.fail(w, r, errkind.Errorf(errkind.Forbidden, "project_id %q: a member creates secrets of its own project only", req.ProjectID))
			return
		}
	default:
		h.fail(w, r, errkind.Errorf(errkind.Forbidden, "only an administrator or a project member may create secrets"))
		return
	}
	s, err := h.svc.CreateSecret(r.Context(), req)
	clear(req.Payload)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, s)
}

// scoped returns the secret of the request's {uuid}, or answers 404 when
// the caller may not see it.
func (h secrets) scoped(w http.ResponseWriter, r *http.Request) *types.Secret {
	id := mux.Vars(r)["uuid"]
	s, err := h.svc.Secret(r.Context(), id)
	if err == nil && !sees(principalFrom(r.Context()), s.ProjectID) {
		err = fmt.Errorf("secret %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		h.fail(w, r, err)
		return nil
	}
	return s
}

func (h secrets) get(w http.ResponseWriter, r *http.Request) {
	if s := h.scoped(w, r); s != nil {
		writeJSON(w, http.StatusOK, s)
	}
}

func (h secrets) delete(w http.ResponseWriter, r *http.Request) {
	s := h.scoped(w, r)
	if s == nil {
		return
	}
	if err := h.svc.DeleteSecret(r.Context(), s.UUID); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
