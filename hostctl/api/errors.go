package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/clip"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/logbudget"
	"github.com/vmeta/vmeta/internal/model"
)

// httpError is an error the API itself answers with a given status that
// no kind names (405 method not allowed). Every other refusal of the API
// is an error of a kind (errkind.Errorf), mapped like the services' errors.
func httpError(status int, format string, args ...any) error {
	return &types.Error{Message: fmt.Sprintf(format, args...), Status: status}
}

// kindStatus is the HTTP status of each kind of error (package errkind);
// the client (hostctl/api/client) maps the statuses back to the kinds.
var kindStatus = map[errkind.Kind]int{
	errkind.Invalid:         http.StatusBadRequest,
	errkind.Unauthenticated: http.StatusUnauthorized,
	errkind.Forbidden:       http.StatusForbidden,
	errkind.NotFound:        http.StatusNotFound,
	errkind.Conflict:        http.StatusConflict,
	errkind.TooLarge:        http.StatusRequestEntityTooLarge,
	errkind.Unsupported:     http.StatusNotImplemented,
	errkind.Unavailable:     http.StatusServiceUnavailable,
}

// statusOf maps errors to HTTP status codes, in one place: an error's
// kind (its outermost, errkind.Of) names the status; an error without a
// kind is a 500. The packages' sentinels carry their kinds (store.ErrNotFound
// is a NotFound, controller.ErrState a Conflict…), so a new feature's
// errors need nothing here.
func statusOf(err error) int {
	var ae *types.Error
	if errors.As(err, &ae) && ae.Status != 0 {
		return ae.Status
	}
	if status, ok := kindStatus[errkind.Of(err)]; ok {
		return status
	}
	return http.StatusInternalServerError
}

// errorWriter answers failed requests: the status from statusOf, the body
// a types.Error listing an invalid spec's fields, and one log line.
//
// Nothing a caller sent is copied whole into the body or the log: the
// message, the path and every field value go through package clip. The
// log lines of refusals to callers not authenticated (the 401s of the TCP
// listener) are bounded per peer by refusals: a flood of them from one
// address writes a burst of lines, then one per interval saying how many
// were suppressed. An authenticated caller's refusals are all logged.
type errorWriter struct {
	log      *slog.Logger
	refusals *logbudget.Budget // nil: every refusal is logged
}

func (e errorWriter) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	msg := clip.String(err.Error(), clip.Message)
	body := &types.Error{Message: msg}
	var se *model.SpecError
	if errors.As(err, &se) {
		for _, fe := range se.Errors {
			body.Fields = append(body.Fields, types.FieldError{Field: clip.String(fe.Field, clip.Log), Value: clip.Any(fe.Value, clip.Value), Rule: clip.String(fe.Rule, clip.Log)})
		}
		body.Summary = summary(body.Message, se) // summary.go
	}
	path := clip.String(r.URL.Path, clip.Log)
	switch {
	case status == http.StatusInternalServerError:
		e.log.Error("admin request failed", "method", clip.String(r.Method, clip.Log), "path", path, "err", msg)
	case e.refusals == nil || principalFrom(r.Context()).Role != "":
		e.log.Info("admin request refused", "method", clip.String(r.Method, clip.Log), "path", path, "status", status, "err", msg)
	default:
		peer := peerOf(r)
		if ok, suppressed := e.refusals.Allow(peer); ok {
			args := []any{"method", clip.String(r.Method, clip.Log), "path", path, "status", status, "peer", peer, "err", msg}
			if suppressed > 0 {
				args = append(args, "suppressed", suppressed)
			}
			e.log.Info("admin request refused", args...)
		}
	}
	writeJSON(w, status, body)
}

// peerOf names the peer of a request for the refusal budget: the
// client's address without its port on TCP, "unix" on the admin socket.
func peerOf(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	if r.RemoteAddr == "" || r.RemoteAddr == "@" {
		return "unix"
	}
	return clip.String(r.RemoteAddr, clip.Log)
}

// unmatched answers a request no route takes: 405 with the Allow header
// listing the methods the path does take, or a JSON 404 when it takes
// none. mux's own handlers send no Allow header, and its method-mismatch
// tracking is lost across nested subrouters (a later route whose prefix
// matches clears it), so both cases come here and the methods are found
// by asking the router itself for each method its routes use: they cannot
// drift from the routes.
func unmatched(root *mux.Router, e errorWriter) http.Handler {
	var known []string
	_ = root.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		ms, err := route.GetMethods()
		if err == nil {
			for _, m := range ms {
				if !slices.Contains(known, m) {
					known = append(known, m)
				}
			}
		}
		return nil
	})
	slices.Sort(known)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		allow := allowed(root, r, known)
		if len(allow) == 0 {
			e.fail(w, r, errkind.Errorf(errkind.NotFound, "%s: no such endpoint of the admin API", clip.Quote(r.URL.Path, clip.Log)))
			return
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		e.fail(w, r, httpError(http.StatusMethodNotAllowed, "%s %s: method not allowed (allowed: %s)", clip.String(r.Method, clip.Log), clip.Quote(r.URL.Path, clip.Log), strings.Join(allow, ", ")))
	})
}

// allowed returns the methods among known that some route takes for r's
// path.
func allowed(root *mux.Router, r *http.Request, known []string) []string {
	var out []string
	for _, m := range known {
		probe := r.Clone(r.Context())
		probe.Method = m
		var match mux.RouteMatch
		if root.Match(probe, &match) && match.MatchErr == nil {
			out = append(out, m)
		}
	}
	if slices.Contains(out, http.MethodGet) && !slices.Contains(out, http.MethodHead) {
		// A GET route takes HEAD too (headAsGet), as in net/http.
		out = append(out, http.MethodHead)
		slices.Sort(out)
	}
	return out
}

// writeJSON answers with v as compact JSON: indenting would make the
// answer grow with the square of a nested value's depth.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
