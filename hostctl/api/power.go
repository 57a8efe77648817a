package api

import (
	"context"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// powerService boots and shuts down instances' domains.
type powerService interface {
	Start(ctx context.Context, name string) (*types.Instance, error)
	Stop(ctx context.Context, name string, timeout time.Duration) (*types.Instance, error)
}

// power is /v1/instances/{name}/start and /stop.
type power struct {
	svc powerService
	errorWriter
}

func (h power) routes(r *mux.Router) {
	r.HandleFunc("/start", h.start).Methods(http.MethodPost)
	r.HandleFunc("/stop", h.stop).Methods(http.MethodPost)
}

func (h power) start(w http.ResponseWriter, r *http.Request) {
	h.answer(w, r, func(ctx context.Context, name string) (*types.Instance, error) {
		return h.svc.Start(ctx, name)
	})
}

func (h power) stop(w http.ResponseWriter, r *http.Request) {
	var req types.StopRequest
	if !h.decode(w, r, &req) {
		return
	}
	h.answer(w, r, func(ctx context.Context, name string) (*types.Instance, error) {
		if req.TimeoutSeconds < 0 {
			return nil, httpError(http.StatusBadRequest, "timeout_seconds: must not be negative")
		}
		return h.svc.Stop(ctx, name, time.Duration(req.TimeoutSeconds*float64(time.Second)))
	})
}
