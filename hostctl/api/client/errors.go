package client

import (
	"net/http"

	"github.com/vmeta/vmeta/internal/errkind"
)

// The kinds of error a refusal is marked with (package internal/errkind),
// for programs outside this module, which cannot import it:
// errors.Is(err, client.NotFound).
const (
	Invalid         = errkind.Invalid         // 400
	Unauthenticated = errkind.Unauthenticated // 401
	Forbidden       = errkind.Forbidden       // 403
	NotFound        = errkind.NotFound        // 404
	Conflict        = errkind.Conflict        // 409
	TooLarge        = errkind.TooLarge        // 413
	Unsupported     = errkind.Unsupported     // 501
	Unavailable     = errkind.Unavailable     // 503
)

// statusKind is the kind of error each status stands for: the inverse of
// the daemon's mapping (hostctl/api's statusOf), so that an error comes
// back across the wire of the kind it left with.
var statusKind = map[int]errkind.Kind{
	http.StatusBadRequest:            errkind.Invalid,
	http.StatusUnauthorized:          errkind.Unauthenticated,
	http.StatusForbidden:             errkind.Forbidden,
	http.StatusNotFound:              errkind.NotFound,
	http.StatusConflict:              errkind.Conflict,
	http.StatusRequestEntityTooLarge: errkind.TooLarge,
	http.StatusNotImplemented:        errkind.Unsupported,
	http.StatusServiceUnavailable:    errkind.Unavailable,
}
