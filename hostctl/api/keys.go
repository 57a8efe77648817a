package api

import (
	"context"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/errkind"
)

// KeyService is what the keys resource needs: the key rotation engine,
// the instances by name (for per-instance disk policies) and the current
// proxy secret.
type KeyService interface {
	Reports(ctx context.Context, c keyrotation.Class) ([]keyrotation.Report, error)
	SetPolicy(ctx context.Context, s keyrotation.Subject, p keyrotation.Policy) (keyrotation.Policy, error)
	Rotate(ctx context.Context, s keyrotation.Subject) (keyrotation.Rotation, error)
	Prune(ctx context.Context, c keyrotation.Class, keep int) (keyrotation.Status, error)
	// InstanceSubject resolves an instance name for a per-instance class.
	InstanceSubject(ctx context.Context, c keyrotation.Class, name string) (keyrotation.Subject, error)
	// RevealProxySecret returns the current proxy shared secret.
	RevealProxySecret(ctx context.Context) ([]byte, error)
}

// keysAPI is /v1/keys, for administrators only:
//
//	GET  /v1/keys[?class=C]                   every subject's policy and status
//	PUT  /v1/keys/{class}/policy[?instance=N] set a policy (types.KeyPolicy); 409 on a decrease
//	POST /v1/keys/{class}/rotate[?instance=N] rotate once more (the policy becomes KeyGeneration+1; subjects 0: nothing to rotate)
//	POST /v1/keys/{class}/prune               drop prior keys beyond keep (types.KeyPruneRequest)
//	GET  /v1/keys/proxy-secret/reveal         the current proxy secret
//
// {class} is a class name or its short alias (kek, token, proxy, disk).
type keysAPI struct {
	svc KeyService
	errorWriter
}

func (h keysAPI) routes(r *mux.Router) {
	r.Use(h.adminOnly)
	if h.svc == nil {
		r.PathPrefix("").HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.fail(w, r, errkind.Errorf(errkind.Unsupported, "key rotation is not served by this daemon"))
		})
		return
	}
	r.HandleFunc("", h.list).Methods(http.MethodGet)
	r.HandleFunc("/{class}/policy", h.setPolicy).Methods(http.MethodPut)
	r.HandleFunc("/{class}/rotate", h.rotate).Methods(http.MethodPost)
	r.HandleFunc("/{class}/prune", h.prune).Methods(http.MethodPost)
	r.HandleFunc("/{class}/reveal", h.reveal).Methods(http.MethodGet)
}

func (h keysAPI) adminOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if principalFrom(r.Context()).Role != types.RoleAdmin {
			h.fail(w, r, errkind.Errorf(errkind.Forbidden, "only an administrator may read or change key rotation"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (h keysAPI) list(w http.ResponseWriter, r *http.Request) {
	var c keyrotation.Class
	if v := r.URL.Query().Get("class"); v != "" {
		var err error
		if c, err = keyrotation.ParseClassAlias(v); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	reports, err := h.svc.Reports(r.Context(), c)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := make([]types.KeyReport, len(reports))
	for i, rep := range reports {
		out[i] = wireKeyReport(rep)
	}
	writeJSON(w, http.StatusOK, out)
}

// subject is the {class} and ?instance= of a request.
func (h keysAPI) subject(r *http.Request) (keyrotation.Subject, error) {
	c, err := keyrotation.ParseClassAlias(mux.Vars(r)["class"])
	if err != nil {
		return keyrotation.Subject{}, err
	}
	name := r.URL.Query().Get("instance")
	switch {
	case name == "":
		return keyrotation.Subject{Class: c}, nil
	case !c.PerInstance():
		return keyrotation.Subject{}, errkind.Errorf(errkind.Invalid, "instance %q: %s has no per-instance keys (only %s)", name, c, keyrotation.Disk)
	}
	return h.svc.InstanceSubject(r.Context(), c, name)
}

func (h keysAPI) setPolicy(w http.ResponseWriter, r *http.Request) {
	s, err := h.subject(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var p types.KeyPolicy
	if !h.decode(w, r, &p) {
		return
	}
	out, err := h.svc.SetPolicy(r.Context(), s, domainKeyPolicy(p))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wireKeyPolicy(out))
}

func (h keysAPI) rotate(w http.ResponseWriter, r *http.Request) {
	s, err := h.subject(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out, err := h.svc.Rotate(r.Context(), s)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, wireKeyRotation(out))
}

func (h keysAPI) prune(w http.ResponseWriter, r *http.Request) {
	s, err := h.subject(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var req types.KeyPruneRequest
	if !h.decode(w, r, &req) {
		return
	}
	st, err := h.svc.Prune(r.Context(), s.Class, req.Keep)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wireKeyStatus(st))
}

func (h keysAPI) reveal(w http.ResponseWriter, r *http.Request) {
	s, err := h.subject(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if s.Class != keyrotation.Proxy {
		h.fail(w, r, errkind.Errorf(errkind.Invalid, "class %s: only the %s is revealed (other keys never leave the daemon)", s.Class, keyrotation.Proxy))
		return
	}
	secret, err := h.svc.RevealProxySecret(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	defer clear(secret)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, types.KeyReveal{Class: string(s.Class), Secret: string(secret)})
}
