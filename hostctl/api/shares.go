package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/model"
)

// ShareService is the share registry and the server shares API
// (hostctl/shares.Service).
type ShareService interface {
	CreateShare(ctx context.Context, p types.Principal, req types.ShareCreateRequest) (types.Share, error)
	ListShares(ctx context.Context, p types.Principal) ([]types.Share, error)
	GetShare(ctx context.Context, p types.Principal, id string) (types.Share, error)
	DeleteShare(ctx context.Context, p types.Principal, id string) error
	ServerShares(ctx context.Context, p types.Principal, server string) ([]types.ShareMapping, error)
	ServerShare(ctx context.Context, p types.Principal, server, shareID string) (types.ShareMapping, error)
	AttachShare(ctx context.Context, p types.Principal, server string, req types.ServerShareAttach) (types.ShareMapping, error)
	DetachShare(ctx context.Context, p types.Principal, server, shareID string, live bool) (types.ShareMapping, error)
}

// sharesAPI is the share registry and the server shares API:
//
//	GET    /v1/shares                             the registry (a member: its project's)
//	POST   /v1/shares                             create a share (admin; types.ShareCreateRequest)
//	GET    /v1/shares/{share_id}                  show
//	DELETE /v1/shares/{share_id}                  delete (admin; 409 while mapped)
//	GET    /v1/servers/{id}/shares                {"shares": [...]}
//	POST   /v1/servers/{id}/shares                attach, 202 ({"share": {"share_id", "tag"}}; ?live=1 to a running server)
//	GET    /v1/servers/{id}/shares/{share_id}     {"share": {...}}
//	DELETE /v1/servers/{id}/shares/{share_id}     detach, 202 (?live=1 from a running server)
//
// {id} is the server's UUID or its name. export_location is in the
// answers to administrators only, and never in a log line.
type sharesAPI struct {
	svc ShareService
	errorWriter
}

func (h sharesAPI) routes(v1 *mux.Router) {
	reg := v1.PathPrefix("/shares").Subrouter()
	reg.HandleFunc("", h.list).Methods(http.MethodGet)
	reg.HandleFunc("", h.create).Methods(http.MethodPost)
	reg.HandleFunc("/ceph-auth", h.cephAuth).Methods(http.MethodPost)
	reg.HandleFunc("/{share_id}", h.show).Methods(http.MethodGet)
	reg.HandleFunc("/{share_id}", h.delete).Methods(http.MethodDelete)
	srv := v1.PathPrefix("/servers/{id}/shares").Subrouter()
	srv.HandleFunc("", h.serverList).Methods(http.MethodGet)
	srv.HandleFunc("", h.attach).Methods(http.MethodPost)
	srv.HandleFunc("/{share_id}", h.serverShow).Methods(http.MethodGet)
	srv.HandleFunc("/{share_id}", h.detach).Methods(http.MethodDelete)
}

// fail answers a failed share request; the error's field values are left
// out of the log line (an export location is one).
func (h sharesAPI) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := h.errorWriter
	e.log = slog.New(redactingHandler{h.errorWriter.log.Handler(), err})
	e.fail(w, r, err)
}

// redactingHandler logs a request's error without its field values.
type redactingHandler struct {
	slog.Handler
	err error
}

func (rh redactingHandler) Handle(ctx context.Context, rec slog.Record) error {
	var se *model.SpecError
	if !errors.As(rh.err, &se) {
		return rh.Handler.Handle(ctx, rec)
	}
	out := slog.NewRecord(rec.Time, rec.Level, rec.Message, rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			var fields []string
			for _, fe := range se.Errors {
				fields = append(fields, fe.Field+": "+fe.Rule)
			}
			a = slog.Any("err", fields)
		}
		out.AddAttrs(a)
		return true
	})
	return rh.Handler.Handle(ctx, out)
}

// CephAuthService is a ShareService that manages a CephX client
// (POST /v1/shares/ceph-auth).
type CephAuthService interface {
	CephAuth(ctx context.Context, p types.Principal, req types.CephAuthRequest) (types.CephAuthResult, error)
}

func (h sharesAPI) cephAuth(w http.ResponseWriter, r *http.Request) {
	cs, ok := h.svc.(CephAuthService)
	if !ok {
		h.fail(w, r, errkind.New(errkind.Unsupported, "this hostctl has no CephFS shares"))
		return
	}
	var req types.CephAuthRequest
	if !h.decode(w, r, &req) {
		return
	}
	out, err := cs.CephAuth(r.Context(), principalFrom(r.Context()), req)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (h sharesAPI) list(w http.ResponseWriter, r *http.Request) {
	out, err := h.svc.ListShares(r.Context(), principalFrom(r.Context()))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, types.SharesBody{Shares: out})
}

func (h sharesAPI) create(w http.ResponseWriter, r *http.Request) {
	var req types.ShareCreateRequest
	if !h.decode(w, r, &req) {
		return
	}
	sh, err := h.svc.CreateShare(r.Context(), principalFrom(r.Context()), req)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, types.ShareBody{Share: sh})
}

func (h sharesAPI) show(w http.ResponseWriter, r *http.Request) {
	sh, err := h.svc.GetShare(r.Context(), principalFrom(r.Context()), mux.Vars(r)["share_id"])
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, types.ShareBody{Share: sh})
}

func (h sharesAPI) delete(w http.ResponseWriter, r *http.Request) {
	if err := h.svc.DeleteShare(r.Context(), principalFrom(r.Context()), mux.Vars(r)["share_id"]); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h sharesAPI) serverList(w http.ResponseWriter, r *http.Request) {
	out, err := h.svc.ServerShares(r.Context(), principalFrom(r.Context()), mux.Vars(r)["id"])
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, types.ServerSharesBody{Shares: out})
}

func (h sharesAPI) serverShow(w http.ResponseWriter, r *http.Request) {
	m, err := h.svc.ServerShare(r.Context(), principalFrom(r.Context()), mux.Vars(r)["id"], mux.Vars(r)["share_id"])
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, types.ServerShareBody{Share: m})
}

func (h sharesAPI) attach(w http.ResponseWriter, r *http.Request) {
	var req types.ServerShareRequest
	if !h.decode(w, r, &req) {
		return
	}
	live, err := liveQuery(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	req.Share.Live = live
	m, err := h.svc.AttachShare(r.Context(), principalFrom(r.Context()), mux.Vars(r)["id"], req.Share)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, types.ServerShareBody{Share: m})
}

func (h sharesAPI) detach(w http.ResponseWriter, r *http.Request) {
	live, err := liveQuery(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	m, err := h.svc.DetachShare(r.Context(), principalFrom(r.Context()), mux.Vars(r)["id"], mux.Vars(r)["share_id"], live)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, types.ServerShareBody{Share: m})
}

// liveQuery reads ?live= (a boolean).
func liveQuery(r *http.Request) (bool, error) {
	v := r.URL.Query().Get("live")
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errkind.Errorf(errkind.Invalid, "query parameter live=%q: must be true or false", v)
	}
	return b, nil
}

// noShares answers the share paths of a daemon without the share service.
type noShares struct{ errorWriter }

func (h noShares) routes(v1 *mux.Router) {
	fail := func(w http.ResponseWriter, r *http.Request) {
		h.errorWriter.fail(w, r, errkind.Errorf(errkind.Unsupported, "shares are not served by this daemon"))
	}
	v1.PathPrefix("/shares").HandlerFunc(fail)
	v1.PathPrefix("/servers/{id}/shares").HandlerFunc(fail)
}
