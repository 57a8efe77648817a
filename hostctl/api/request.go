package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/internal/errkind"
)

// maxRequestBody bounds the JSON body of a device or power request.
const maxRequestBody = 64 << 10

// decode reads the JSON body of a request on one instance into req (an
// empty body leaves req zero; unknown fields are refused). It answers the
// request itself and returns false when the body is bad.
func (e errorWriter) decode(w http.ResponseWriter, r *http.Request, req any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	if err != nil {
		e.fail(w, r, errkind.Errorf(errkind.TooLarge, "read request: %v", err))
		return false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return true
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		e.fail(w, r, errkind.Errorf(errkind.Invalid, "request body: %v", err))
		return false
	}
	return true
}

// answer runs op on the request's (project-scoped) instance and answers
// with the instance op returns.
func (e errorWriter) answer(w http.ResponseWriter, r *http.Request, op func(ctx context.Context, name string) (*controller.Instance, error)) {
	inst, err := op(r.Context(), mux.Vars(r)["name"])
	if err != nil {
		e.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wireInstance(inst))
}
