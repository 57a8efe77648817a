package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/internal/errkind"
)

// ConfigDriveService builds an instance's config drive.
type ConfigDriveService interface {
	WriteConfigDrive(ctx context.Context, name string, format configdrive.Format, w io.Writer) (int64, error)
}

// configDrives is /v1/instances/{name}/configdrive.
type configDrives struct {
	svc ConfigDriveService
	errorWriter
}

func (h configDrives) routes(r *mux.Router) {
	r.HandleFunc("/configdrive", h.get).Methods(http.MethodGet)
}

func (h configDrives) get(w http.ResponseWriter, r *http.Request) {
	format := configdrive.Format(r.URL.Query().Get("format"))
	switch format {
	case "":
		format = configdrive.ISO9660
	case configdrive.ISO9660, configdrive.VFAT:
	default:
		h.fail(w, r, errkind.Errorf(errkind.Invalid, "format %q: must be iso9660 or vfat", format))
		return
	}
	// Build into a buffer first so that an error is still a clean JSON
	// response; drives are small (hundreds of KiB).
	var buf bytes.Buffer
	if _, err := h.svc.WriteConfigDrive(r.Context(), mux.Vars(r)["name"], format, &buf); err != nil {
		h.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", fmt.Sprint(buf.Len()))
	_, _ = w.Write(buf.Bytes())
}
