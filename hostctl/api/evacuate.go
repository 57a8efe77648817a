package api

import (
	"context"

	"net/http"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/errkind"
)

// EvacuationService rebuilds on this host the instances of down hosts
// (hostctl/migrate, evacuate.go).
type EvacuationService interface {
	Evacuate(ctx context.Context, name, host string) (types.Evacuation, error)
}

// evacuations is POST /v1/instances/{name}/evacuate
// (types.EvacuateRequest), answered with the evacuation
// (types.Evacuation); for administrators. A request naming no host or
// another host than this one (the new host rebuilds), or an instance of
// this host, is a 400; an instance whose host is alive, that a part
// refuses (a shelved one, shares this host cannot mount) or whose disks
// this host cannot make (its image missing) a 409.
type evacuations struct {
	svc EvacuationService
	errorWriter
}

func (h evacuations) routes(r *mux.Router) {
	r.HandleFunc("/evacuate", h.evacuate).Methods(http.MethodPost)
}

func (h evacuations) evacuate(w http.ResponseWriter, r *http.Request) {
	if !h.adminOnly(w, r) {
		return
	}
	var req types.EvacuateRequest
	if !h.decode(w, r, &req) {
		return
	}
	if req.Host == "" {
		h.fail(w, r, errkind.Errorf(errkind.Invalid, "host: required (the host to rebuild the instance on)"))
		return
	}
	ev, err := h.svc.Evacuate(r.Context(), mux.Vars(r)["name"], req.Host)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ev)
}
