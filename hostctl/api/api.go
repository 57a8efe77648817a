// Package api is hostctl's admin API: JSON over HTTP on a unix socket,
// served by `hostctl serve` and used by the hostctl client commands.
//
//	GET    /v1/instances                      list
//	POST   /v1/instances                      apply a spec (YAML or JSON body)
//	GET    /v1/instances/{name}               show
//	DELETE /v1/instances/{name}               delete
//	GET    /v1/instances/{name}/configdrive   a config drive image (?format=iso9660|vfat)
//	POST   /v1/instances/{name}/start         boot the domain
//	POST   /v1/instances/{name}/stop          shut it down ({"timeout_seconds": N}), then power off
//	POST   /v1/instances/{name}/disks         create and attach a disk (types.DiskRequest)
//	DELETE /v1/instances/{name}/disks         detach a disk (?tag=T or ?target=vdX; &live=1 &config=1)
//	POST   /v1/instances/{name}/nics          attach a NIC (types.NICRequest)
//	DELETE /v1/instances/{name}/nics          detach a NIC (?tag=T or ?mac=M; &live=1 &config=1)
//	GET    /v1/whoami                         the caller's principal
//
// Every instance request answers with the instance (types.Instance,
// whose "state" is its libvirt domain's state, "missing" when the domain
// was removed behind hostctl's back), except delete (204).
//
// On the unix socket every caller is an administrator. On the optional TCP
// listener callers authenticate with "Authorization: Bearer <token>"
// (TokenAuth): admins see everything, members only their project's
// instances — to a member, another project's instance does not exist.
//
// Errors are {"error": "...", "fields": [{"field","value","rule"}]} with
// 400 for an invalid spec or request, 401 without a valid token, 403
// outside the caller's project, 404 for an unknown instance or device, 409
// for a conflict or a domain state that does not allow the request, 501
// for a libvirt request to a daemon without libvirt, 503 when libvirtd is
// unreachable; the mapping lives in one place, statusOf.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// Controller is what the API needs from hostctl's controller.
type Controller interface {
	ApplyInstance(ctx context.Context, in *model.Instance) (*types.Instance, error)
	Get(ctx context.Context, name string) (*types.Instance, error)
	List(ctx context.Context) ([]*types.Instance, error)
	Delete(ctx context.Context, name string) error
	WriteConfigDrive(ctx context.Context, name string, format configdrive.Format, w io.Writer) (int64, error)
	Start(ctx context.Context, name string) (*types.Instance, error)
	Stop(ctx context.Context, name string, timeout time.Duration) (*types.Instance, error)
	AttachDisk(ctx context.Context, name string, req types.DiskRequest) (*types.Instance, error)
	DetachDisk(ctx context.Context, name string, req types.DetachRequest) (*types.Instance, error)
	AttachNIC(ctx context.Context, name string, req types.NICRequest) (*types.Instance, error)
	DetachNIC(ctx context.Context, name string, req types.DetachRequest) (*types.Instance, error)
}

// StopRequest is the body of POST /v1/instances/{name}/stop.
type StopRequest struct {
	// TimeoutSeconds bounds the graceful shutdown before the domain is
	// powered off; controller.DefaultStopTimeout when 0.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
}

// Error is the body of every error response.
type Error struct {
	Message string       `json:"error"`
	Fields  []FieldError `json:"fields,omitempty"`
	status  int
}

// FieldError is one invalid field of a spec.
type FieldError struct {
	Field string `json:"field"`
	Value any    `json:"value,omitempty"`
	Rule  string `json:"rule"`
}

func (e *Error) Error() string { return e.Message }

// StatusCode is the HTTP status the error came with (client side).
func (e *Error) StatusCode() int { return e.status }

// maxSpecBody bounds a request body (specs are at most model.MaxSpecSize).
const maxSpecBody = model.MaxSpecSize + 1

// Handler returns the admin API handler for the unix socket, where every
// caller is LocalAdmin.
func Handler(c Controller, log *slog.Logger) http.Handler {
	return NewHandler(c, log, localAuth{})
}

// NewHandler returns the admin API handler, authenticating every request
// with auth (a *TokenAuth on a TCP listener).
func NewHandler(c Controller, log *slog.Logger, auth Authenticator) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	h := &handler{c: c, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/instances", h.list)
	mux.HandleFunc("POST /v1/instances", h.apply)
	mux.HandleFunc("GET /v1/instances/{name}", h.get)
	mux.HandleFunc("DELETE /v1/instances/{name}", h.delete)
	mux.HandleFunc("GET /v1/instances/{name}/configdrive", h.configDrive)
	mux.HandleFunc("POST /v1/instances/{name}/start", h.start)
	mux.HandleFunc("POST /v1/instances/{name}/stop", h.stop)
	mux.HandleFunc("POST /v1/instances/{name}/disks", h.attachDisk)
	mux.HandleFunc("DELETE /v1/instances/{name}/disks", h.detachDisk)
	mux.HandleFunc("POST /v1/instances/{name}/nics", h.attachNIC)
	mux.HandleFunc("DELETE /v1/instances/{name}/nics", h.detachNIC)
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /v1/whoami", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, principalFrom(r.Context()))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := auth.Authenticate(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="hostctl"`)
			h.fail(w, r, &Error{Message: err.Error(), status: http.StatusUnauthorized})
			return
		}
		mux.ServeHTTP(w, r.WithContext(withPrincipal(r.Context(), p)))
	})
}

type handler struct {
	c   Controller
	log *slog.Logger
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	insts, err := h.c.List(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	p := principalFrom(r.Context())
	visible := make([]*types.Instance, 0, len(insts))
	for _, in := range insts {
		if p.sees(in.Spec.ProjectID) {
			visible = append(visible, in)
		}
	}
	writeJSON(w, http.StatusOK, visible)
}

// visible returns the named instance if the caller may see it; to a member,
// another project's instance does not exist.
func (h *handler) visible(r *http.Request, name string) (*types.Instance, error) {
	inst, err := h.c.Get(r.Context(), name)
	if err != nil {
		return nil, err
	}
	if !principalFrom(r.Context()).sees(inst.Spec.ProjectID) {
		return nil, fmt.Errorf("instance %s: %w", name, store.ErrNotFound)
	}
	return inst, nil
}

func (h *handler) apply(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSpecBody))
	if err != nil {
		h.fail(w, r, &Error{Message: fmt.Sprintf("read spec: %v", err), status: http.StatusRequestEntityTooLarge})
		return
	}
	in, err := model.ParseSpec(body)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if p := principalFrom(r.Context()); p.Role != RoleAdmin {
		// A member applies only within its project; an omitted project_id
		// means its own.
		switch {
		case p.Role != RoleMember:
			h.fail(w, r, &Error{Message: "not allowed", status: http.StatusForbidden})
			return
		case in.ProjectID == "":
			in.ProjectID = p.Project
		case in.ProjectID != p.Project:
			h.fail(w, r, &Error{Message: fmt.Sprintf("project_id: %q: a member of project %q may apply only its own project's instances", in.ProjectID, p.Project), status: http.StatusForbidden})
			return
		}
		if old, err := h.c.Get(r.Context(), in.Name); err == nil && !p.sees(old.Spec.ProjectID) {
			h.fail(w, r, &Error{Message: fmt.Sprintf("name: %q: already in use", in.Name), status: http.StatusConflict})
			return
		}
	}
	inst, err := h.c.ApplyInstance(r.Context(), in)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, inst)
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	inst, err := h.visible(r, r.PathValue("name"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, inst)
}

func (h *handler) delete(w http.ResponseWriter, r *http.Request) {
	if _, err := h.visible(r, r.PathValue("name")); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := h.c.Delete(r.Context(), r.PathValue("name")); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) configDrive(w http.ResponseWriter, r *http.Request) {
	format := configdrive.Format(r.URL.Query().Get("format"))
	switch format {
	case "":
		format = configdrive.ISO9660
	case configdrive.ISO9660, configdrive.VFAT:
	default:
		h.fail(w, r, &Error{Message: fmt.Sprintf("format %q: must be iso9660 or vfat", format), status: http.StatusBadRequest})
		return
	}
	if _, err := h.visible(r, r.PathValue("name")); err != nil {
		h.fail(w, r, err)
		return
	}
	// Build into a buffer first so that an error is still a clean JSON
	// response; drives are small (hundreds of KiB).
	var buf bytes.Buffer
	if _, err := h.c.WriteConfigDrive(r.Context(), r.PathValue("name"), format, &buf); err != nil {
		h.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", fmt.Sprint(buf.Len()))
	_, _ = w.Write(buf.Bytes())
}

func (h *handler) start(w http.ResponseWriter, r *http.Request) {
	h.instanceOp(w, r, nil, func(ctx context.Context, name string) (*types.Instance, error) {
		return h.c.Start(ctx, name)
	})
}

func (h *handler) stop(w http.ResponseWriter, r *http.Request) {
	var req StopRequest
	h.instanceOp(w, r, &req, func(ctx context.Context, name string) (*types.Instance, error) {
		if req.TimeoutSeconds < 0 {
			return nil, &Error{Message: "timeout_seconds: must not be negative", status: http.StatusBadRequest}
		}
		return h.c.Stop(ctx, name, time.Duration(req.TimeoutSeconds*float64(time.Second)))
	})
}

func (h *handler) attachDisk(w http.ResponseWriter, r *http.Request) {
	var req types.DiskRequest
	h.instanceOp(w, r, &req, func(ctx context.Context, name string) (*types.Instance, error) {
		return h.c.AttachDisk(ctx, name, req)
	})
}

func (h *handler) detachDisk(w http.ResponseWriter, r *http.Request) {
	h.instanceOp(w, r, nil, func(ctx context.Context, name string) (*types.Instance, error) {
		req, err := detachRequest(r)
		if err != nil {
			return nil, err
		}
		return h.c.DetachDisk(ctx, name, req)
	})
}

func (h *handler) attachNIC(w http.ResponseWriter, r *http.Request) {
	var req types.NICRequest
	h.instanceOp(w, r, &req, func(ctx context.Context, name string) (*types.Instance, error) {
		return h.c.AttachNIC(ctx, name, req)
	})
}

func (h *handler) detachNIC(w http.ResponseWriter, r *http.Request) {
	h.instanceOp(w, r, nil, func(ctx context.Context, name string) (*types.Instance, error) {
		req, err := detachRequest(r)
		if err != nil {
			return nil, err
		}
		return h.c.DetachNIC(ctx, name, req)
	})
}

// maxRequestBody bounds the JSON body of a device or power request.
const maxRequestBody = 64 << 10

// instanceOp runs op on the named instance after checking that the caller
// may see it (to a member, another project's instance does not exist) and
// decoding the JSON body into req (an empty body leaves req zero), and
// answers with the instance op returns.
func (h *handler) instanceOp(w http.ResponseWriter, r *http.Request, req any, op func(ctx context.Context, name string) (*types.Instance, error)) {
	name := r.PathValue("name")
	if _, err := h.visible(r, name); err != nil {
		h.fail(w, r, err)
		return
	}
	if req != nil {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
		if err != nil {
			h.fail(w, r, &Error{Message: fmt.Sprintf("read request: %v", err), status: http.StatusRequestEntityTooLarge})
			return
		}
		if len(bytes.TrimSpace(body)) > 0 {
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(req); err != nil {
				h.fail(w, r, &Error{Message: fmt.Sprintf("request body: %v", err), status: http.StatusBadRequest})
				return
			}
		}
	}
	inst, err := op(r.Context(), name)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, inst)
}

// detachRequest reads ?tag= | ?target= | ?mac= and ?live= ?config=.
func detachRequest(r *http.Request) (types.DetachRequest, error) {
	q := r.URL.Query()
	req := types.DetachRequest{Tag: q.Get("tag"), Target: q.Get("target"), MAC: q.Get("mac")}
	for _, f := range []struct {
		key string
		dst *bool
	}{{"live", &req.Live}, {"config", &req.Config}} {
		if v := q.Get(f.key); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return req, &Error{Message: fmt.Sprintf("%s=%q: must be true or false", f.key, v), status: http.StatusBadRequest}
			}
			*f.dst = b
		}
	}
	return req, nil
}

// statusOf maps errors to HTTP status codes, in one place.
func statusOf(err error) int {
	var ae *Error
	switch {
	case errors.As(err, &ae) && ae.status != 0:
		return ae.status
	case errors.Is(err, model.ErrInvalidSpec):
		return http.StatusBadRequest
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, store.ErrConflict), errors.Is(err, virt.ErrConflict), errors.Is(err, controller.ErrState):
		return http.StatusConflict
	case errors.Is(err, virt.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, controller.ErrNoHypervisor):
		return http.StatusNotImplemented
	case errors.Is(err, virt.ErrUnreachable):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	body := &Error{Message: err.Error()}
	var se *model.SpecError
	if errors.As(err, &se) {
		for _, fe := range se.Errors {
			body.Fields = append(body.Fields, FieldError{Field: fe.Field, Value: fe.Value, Rule: fe.Rule})
		}
	}
	if status == http.StatusInternalServerError {
		h.log.Error("admin request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	} else {
		h.log.Info("admin request refused", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
