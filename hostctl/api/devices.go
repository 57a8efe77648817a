package api

import (
	"context"
	"net/http"
	"strconv"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/types"
	devinv "github.com/vmeta/vmeta/hostctl/devices"
	"github.com/vmeta/vmeta/internal/errkind"
)

// DeviceService is the host's passthrough device inventory
// (hostctl/devices.Inventory) as the devices resource needs it.
type DeviceService interface {
	ListDevices(ctx context.Context, needsCleaning bool, trait string, allHosts bool) ([]devinv.Device, error)
	Show(ctx context.Context, addr string) (devinv.Device, error)
	Clean(ctx context.Context, addr string) (devinv.Device, error)
}

// devices is /v1/devices: the operator's view of the inventory
// (GET ?needs_cleaning=1&trait=T&all_hosts=1; a trait vmeta never sets is
// a 400 naming the ones it does), one device
// (GET /v1/devices/{address}) and the operator saying a device is clean
// (POST /v1/devices/{address}/clean). All for administrators.
type devices struct {
	svc DeviceService
	errorWriter
}

func (h devices) routes(r *mux.Router) {
	r.HandleFunc("", h.list).Methods(http.MethodGet)
	r.HandleFunc("/{address}", h.show).Methods(http.MethodGet)
	r.HandleFunc("/{address}/clean", h.clean).Methods(http.MethodPost)
}

func (h devices) ready(w http.ResponseWriter, r *http.Request) bool {
	if principalFrom(r.Context()).Role != types.RoleAdmin {
		h.fail(w, r, errkind.Errorf(errkind.Forbidden, "only an administrator may do this"))
		return false
	}
	if h.svc == nil {
		h.fail(w, r, errkind.Errorf(errkind.Unsupported, "this hostctl has no device inventory"))
		return false
	}
	return true
}

func boolQuery(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errkind.Errorf(errkind.Invalid, "%s: %q: must be true or false (1 or 0)", name, v)
	}
	return b, nil
}

func (h devices) list(w http.ResponseWriter, r *http.Request) {
	if !h.ready(w, r) {
		return
	}
	nc, err := boolQuery(r, "needs_cleaning")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	all, err := boolQuery(r, "all_hosts")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	list, err := h.svc.ListDevices(r.Context(), nc, r.URL.Query().Get("trait"), all)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, types.DeviceList{Devices: convertAll(list, wireDevice)})
}

func (h devices) show(w http.ResponseWriter, r *http.Request) {
	if !h.ready(w, r) {
		return
	}
	d, err := h.svc.Show(r.Context(), mux.Vars(r)["address"])
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wireDevice(d))
}

func (h devices) clean(w http.ResponseWriter, r *http.Request) {
	if !h.ready(w, r) {
		return
	}
	d, err := h.svc.Clean(r.Context(), mux.Vars(r)["address"])
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wireDevice(d))
}
