package server

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/vmeta/vmeta/internal/store"
)

// MaxPasswordBytes is the largest password a guest may post: Nova keeps
// it in four system_metadata chunks of 255 characters (password.py).
const MaxPasswordBytes = 4 * 255

// maxPasswordRead is how much of a password POST body is read at most; a
// longer body is refused without reading the rest.
const maxPasswordRead = 4 << 10

// servePassword is Nova's password endpoint (nova/api/metadata/password.py)
// for openstack/<version>/password, version 2013-04-04 or later:
//
//   - GET returns the stored password; an empty body when none was posted.
//   - POST stores the body, once: a second POST is 409 Conflict (even one
//     that is too large, as in Nova, which checks for a password first);
//     a body over MaxPasswordBytes is 400. An empty body stores nothing
//     (in Nova an empty password is no password).
//   - Any other method (HEAD included) is 400.
//
// The password is never logged, and never written to a config drive.
func (s *Server) servePassword(w http.ResponseWriter, r *http.Request, v *view, res result) result {
	ctx, cancel := context.WithTimeout(r.Context(), s.storeTimeout)
	defer cancel()
	switch r.Method {
	case http.MethodGet:
		pw, err := s.docs.Password(ctx, v.uuid)
		s.storeResult(err)
		switch {
		case errors.Is(err, store.ErrNotFound):
			pw = nil
		case err != nil:
			return fail(w, res, http.StatusServiceUnavailable, "503 Service Unavailable: metadata store unreachable")
		}
		w.Header()["Cache-Control"] = []string{"no-store"}
		return write(w, r, res, pw, ctText)
	case http.MethodPost:
		_, err := s.docs.Password(ctx, v.uuid)
		s.storeResult(err)
		switch {
		case err == nil:
			return fail(w, res, http.StatusConflict, "409 Conflict: a password is already set")
		case !errors.Is(err, store.ErrNotFound):
			return fail(w, res, http.StatusServiceUnavailable, "503 Service Unavailable: metadata store unreachable")
		}
		if r.ContentLength > MaxPasswordBytes {
			return fail(w, res, http.StatusBadRequest, "400 Bad Request: Request is too large.")
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPasswordRead))
		if err != nil || len(body) > MaxPasswordBytes {
			return fail(w, res, http.StatusBadRequest, "400 Bad Request: Request is too large.")
		}
		if len(body) > 0 {
			err = s.docs.SetPassword(ctx, v.uuid, body)
			s.storeResult(err)
			switch {
			case errors.Is(err, store.ErrConflict):
				return fail(w, res, http.StatusConflict, "409 Conflict: a password is already set")
			case errors.Is(err, store.ErrNotFound):
				return fail(w, res, http.StatusNotFound, "404 Not Found")
			case err != nil:
				return fail(w, res, http.StatusServiceUnavailable, "503 Service Unavailable: metadata store unreachable")
			}
		}
		return write(w, r, res, nil, ctText)
	default:
		return fail(w, res, http.StatusBadRequest, "400 Bad Request")
	}
}
