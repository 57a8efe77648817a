package api

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/model"
)

// PowerService boots and shuts down instances' domains.
type PowerService interface {
	Start(ctx context.Context, name string) (*controller.Instance, error)
	Stop(ctx context.Context, name string, timeout time.Duration) (*controller.Instance, error)
}

// RebootService reboots instances, hard or soft (hostctl/ops).
type RebootService interface {
	Reboot(ctx context.Context, name string, hard bool) (*controller.Instance, error)
}

// power is /v1/instances/{name}/start and /stop.
type power struct {
	svc PowerService
	errorWriter
}

func (h power) routes(r *mux.Router) {
	r.HandleFunc("/start", h.start).Methods(http.MethodPost)
	r.HandleFunc("/stop", h.stop).Methods(http.MethodPost)
}

// reboot is /v1/instances/{name}/reboot.
type reboot struct {
	svc RebootService
	errorWriter
}

func (h reboot) routes(r *mux.Router) {
	r.HandleFunc("/reboot", h.reboot).Methods(http.MethodPost)
}

// reboot is Nova's reboot action: {"type": "HARD"} powers off and starts
// again (the way out of ERROR), {"type": "SOFT"} reboots a running
// instance's guest (libvirt's reboot).
func (h reboot) reboot(w http.ResponseWriter, r *http.Request) {
	var req types.RebootRequest
	if !h.decode(w, r, &req) {
		return
	}
	h.answer(w, r, func(ctx context.Context, name string) (*controller.Instance, error) {
		switch strings.ToUpper(req.Type) {
		case types.RebootHard:
			return h.svc.Reboot(ctx, name, true)
		case types.RebootSoft:
			return h.svc.Reboot(ctx, name, false)
		}
		return nil, &model.SpecError{Errors: []model.FieldError{{Field: "type", Value: req.Type, Rule: "must be HARD or SOFT"}}, Of: "reboot request"}
	})
}

func (h power) start(w http.ResponseWriter, r *http.Request) {
	h.answer(w, r, func(ctx context.Context, name string) (*controller.Instance, error) {
		return h.svc.Start(ctx, name)
	})
}

func (h power) stop(w http.ResponseWriter, r *http.Request) {
	var req types.StopRequest
	if !h.decode(w, r, &req) {
		return
	}
	h.answer(w, r, func(ctx context.Context, name string) (*controller.Instance, error) {
		if req.TimeoutSeconds < 0 {
			return nil, errkind.Errorf(errkind.Invalid, "timeout_seconds: must not be negative")
		}
		return h.svc.Stop(ctx, name, time.Duration(req.TimeoutSeconds*float64(time.Second)))
	})
}
