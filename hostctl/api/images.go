package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/types"
	imagecat "github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/internal/errkind"
)

// ImageService is what the images resource needs: the image directory.
type ImageService interface {
	ImportImage(ctx context.Context, name string, props map[string]string, r io.Reader) (imagecat.Image, error)
	Image(ctx context.Context, name string) (imagecat.Image, error)
	Images(ctx context.Context) ([]imagecat.Image, error)
	DeleteImage(ctx context.Context, name string) error
}

// images is /v1/images, the host's image directory: every caller lists
// and shows images; only an administrator imports and deletes them.
//
//	GET    /v1/images          list
//	POST   /v1/images          import (multipart/form-data: a part "image"
//	                           with types.ImageImport as JSON, then a part
//	                           "file" with the image; 201)
//	GET    /v1/images/{image}  show
//	DELETE /v1/images/{image}  delete (409 naming the instances using it)
type images struct {
	svc ImageService
	errorWriter
}

// maxImageMeta bounds the "image" part of an import.
const maxImageMeta = 1 << 20

func (h images) routes(r *mux.Router) {
	r.HandleFunc("", h.list).Methods(http.MethodGet)
	r.HandleFunc("", h.importImage).Methods(http.MethodPost)
	r.HandleFunc("/{image}", h.get).Methods(http.MethodGet)
	r.HandleFunc("/{image}", h.delete).Methods(http.MethodDelete)
}

func (h images) list(w http.ResponseWriter, r *http.Request) {
	if !h.member(w, r) {
		return
	}
	is, err := h.svc.Images(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wireImages(is))
}

func (h images) importImage(w http.ResponseWriter, r *http.Request) {
	if !h.adminOnly(w, r) {
		return
	}
	mr, err := r.MultipartReader()
	if err != nil {
		h.fail(w, r, errkind.Errorf(errkind.Invalid, "an import is multipart/form-data with parts \"image\" and \"file\": %v", err))
		return
	}
	part, err := mr.NextPart()
	if err != nil || part.FormName() != "image" {
		h.fail(w, r, errkind.Errorf(errkind.Invalid, "the first part of an import must be \"image\" (its name and properties as JSON)"))
		return
	}
	meta, err := io.ReadAll(io.LimitReader(part, maxImageMeta+1))
	if err != nil || len(meta) > maxImageMeta {
		h.fail(w, r, errkind.Errorf(errkind.Invalid, "part \"image\": unreadable or larger than %d bytes", maxImageMeta))
		return
	}
	var req types.ImageImport
	dec := json.NewDecoder(bytes.NewReader(meta))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		h.fail(w, r, errkind.Errorf(errkind.Invalid, "part \"image\": %v", err))
		return
	}
	file, err := mr.NextPart()
	if err != nil || file.FormName() != "file" {
		h.fail(w, r, errkind.Errorf(errkind.Invalid, "the second part of an import must be \"file\" (the image)"))
		return
	}
	img, err := h.svc.ImportImage(r.Context(), req.Name, req.Properties, file)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, wireImage(img))
}

func (h images) get(w http.ResponseWriter, r *http.Request) {
	if !h.member(w, r) {
		return
	}
	img, err := h.svc.Image(r.Context(), mux.Vars(r)["image"])
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wireImage(img))
}

func (h images) delete(w http.ResponseWriter, r *http.Request) {
	if !h.adminOnly(w, r) {
		return
	}
	if err := h.svc.DeleteImage(r.Context(), mux.Vars(r)["image"]); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
