package api

import (
	"context"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/errkind"
)

// MigrationService moves instances between the hosts of the store
// (hostctl/migrate): cold migration, its confirm and its revert.
type MigrationService interface {
	Migrate(ctx context.Context, name string, req types.MigrateRequest) (types.Migration, error)
	ConfirmMigration(ctx context.Context, name string) (types.Migration, error)
	RevertMigration(ctx context.Context, name string) (types.Migration, error)
	Migration(ctx context.Context, name string) (types.Migration, error)
}

// migrations is POST /v1/instances/{name}/migrate (types.MigrateRequest),
// …/confirm-migration and …/revert-migration, and GET …/migration, each
// answered with the move (types.Migration). All of them are for
// administrators. A request naming no host, an unknown one or this one
// is a 400; a host that is down or cannot be reached a 503; an instance
// whose move is not in the state the request needs (a second move, a
// confirm outside verify) or that a part refuses to move (shares, a
// shelved instance) a 409; an instance that is not moving a 404 for
// confirm, revert and GET.
type migrations struct {
	svc MigrationService
	errorWriter
}

func (h migrations) routes(r *mux.Router) {
	r.HandleFunc("/migrate", h.migrate).Methods(http.MethodPost)
	r.HandleFunc("/confirm-migration", h.confirm).Methods(http.MethodPost)
	r.HandleFunc("/revert-migration", h.revert).Methods(http.MethodPost)
	r.HandleFunc("/migration", h.show).Methods(http.MethodGet)
}

func (h migrations) migrate(w http.ResponseWriter, r *http.Request) {
	if !h.adminOnly(w, r) {
		return
	}
	var req types.MigrateRequest
	if !h.decode(w, r, &req) {
		return
	}
	switch {
	case req.Host == "":
		h.fail(w, r, errkind.Errorf(errkind.Invalid, "host: required (the destination host)"))
		return
	case req.TimeoutSeconds < 0 || req.TimeoutSeconds > 3600:
		h.fail(w, r, errkind.Errorf(errkind.Invalid, "timeout_seconds: %g: must be 0 (the default) to 3600", req.TimeoutSeconds))
		return
	}
	h.reply(w, r, func(ctx context.Context, name string) (types.Migration, error) { return h.svc.Migrate(ctx, name, req) })
}

func (h migrations) confirm(w http.ResponseWriter, r *http.Request) {
	if h.adminOnly(w, r) {
		h.reply(w, r, h.svc.ConfirmMigration)
	}
}

func (h migrations) revert(w http.ResponseWriter, r *http.Request) {
	if h.adminOnly(w, r) {
		h.reply(w, r, h.svc.RevertMigration)
	}
}

func (h migrations) show(w http.ResponseWriter, r *http.Request) {
	if h.adminOnly(w, r) {
		h.reply(w, r, h.svc.Migration)
	}
}

func (h migrations) reply(w http.ResponseWriter, r *http.Request, op func(ctx context.Context, name string) (types.Migration, error)) {
	m, err := op(r.Context(), mux.Vars(r)["name"])
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}
