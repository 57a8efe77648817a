package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/auth"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/internal/clip"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/store"
)

type principalKey struct{}

func withPrincipal(ctx context.Context, p types.Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

func principalFrom(ctx context.Context) types.Principal {
	if p, ok := ctx.Value(principalKey{}).(types.Principal); ok {
		return p
	}
	return types.Principal{} // no role: sees nothing
}

// sees reports whether p may see an instance of project.
func sees(p types.Principal, project string) bool {
	return p.Role == types.RoleAdmin || (p.Role == types.RoleMember && p.Project != "" && p.Project == project)
}

// authenticate answers 401 to a caller a does not know, and passes the
// principal of every other one on in the request's context.
func authenticate(a auth.Authenticator, e errorWriter, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := a.Authenticate(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="hostctl"`)
			e.fail(w, r, errkind.Errorf(errkind.Unauthenticated, "%v", err))
			return
		}
		next.ServeHTTP(w, r.WithContext(withPrincipal(r.Context(), p)))
	})
}

type instanceKey struct{}

// instanceGetter is what project scoping needs: one instance by name.
type instanceGetter interface {
	Get(ctx context.Context, name string) (*controller.Instance, error)
}

// scopeInstance is the middleware of every /v1/instances/{name} route: it
// loads the instance and refuses it unless the caller may see it — to a
// member, another project's instance does not exist (404), and nothing
// is called on it. The handlers find the instance in the context.
func scopeInstance(svc instanceGetter, e errorWriter) mux.MiddlewareFunc {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			name := mux.Vars(r)["name"]
			inst, err := svc.Get(r.Context(), name)
			if errors.Is(err, store.ErrNotFound) || (err == nil && !sees(principalFrom(r.Context()), inst.Spec.ProjectID)) {
				// One answer for both, so the message does not tell
				// them apart either.
				err = fmt.Errorf("instance %s: %w", clip.String(name, clip.Log), store.ErrNotFound)
			}
			if err != nil {
				e.fail(w, r, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), instanceKey{}, inst)))
		})
	}
}

// scopedInstance is the instance scopeInstance resolved for the request.
func scopedInstance(r *http.Request) *controller.Instance {
	inst, _ := r.Context().Value(instanceKey{}).(*controller.Instance)
	return inst
}
