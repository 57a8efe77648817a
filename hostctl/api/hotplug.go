package api

import (
	"context"
	"net/http"
	"strconv"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/internal/errkind"
)

// HotplugService attaches and detaches disks and NICs.
type HotplugService interface {
	AttachDisk(ctx context.Context, name string, req types.DiskRequest) (*controller.Instance, error)
	DetachDisk(ctx context.Context, name string, req types.DetachRequest) (*controller.Instance, error)
	AttachNIC(ctx context.Context, name string, req types.NICRequest) (*controller.Instance, error)
	DetachNIC(ctx context.Context, name string, req types.DetachRequest) (*controller.Instance, error)
}

// hotplug is /v1/instances/{name}/disks and /nics.
type hotplug struct {
	svc HotplugService
	errorWriter
}

func (h hotplug) routes(r *mux.Router) {
	r.HandleFunc("/disks", h.attachDisk).Methods(http.MethodPost)
	r.HandleFunc("/disks", h.detachDisk).Methods(http.MethodDelete)
	r.HandleFunc("/nics", h.attachNIC).Methods(http.MethodPost)
	r.HandleFunc("/nics", h.detachNIC).Methods(http.MethodDelete)
}

func (h hotplug) attachDisk(w http.ResponseWriter, r *http.Request) {
	var req types.DiskRequest
	if !h.decode(w, r, &req) {
		return
	}
	h.answer(w, r, func(ctx context.Context, name string) (*controller.Instance, error) {
		return h.svc.AttachDisk(ctx, name, req)
	})
}

func (h hotplug) detachDisk(w http.ResponseWriter, r *http.Request) {
	h.answer(w, r, func(ctx context.Context, name string) (*controller.Instance, error) {
		req, err := detachRequest(r)
		if err != nil {
			return nil, err
		}
		return h.svc.DetachDisk(ctx, name, req)
	})
}

func (h hotplug) attachNIC(w http.ResponseWriter, r *http.Request) {
	var req types.NICRequest
	if !h.decode(w, r, &req) {
		return
	}
	h.answer(w, r, func(ctx context.Context, name string) (*controller.Instance, error) {
		return h.svc.AttachNIC(ctx, name, req)
	})
}

func (h hotplug) detachNIC(w http.ResponseWriter, r *http.Request) {
	h.answer(w, r, func(ctx context.Context, name string) (*controller.Instance, error) {
		req, err := detachRequest(r)
		if err != nil {
			return nil, err
		}
		return h.svc.DetachNIC(ctx, name, req)
	})
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
				return req, errkind.Errorf(errkind.Invalid, "%s=%q: must be true or false", f.key, v)
			}
			*f.dst = b
		}
	}
	return req, nil
}
