package api

import (
	"net/http"

	"github.com/gorilla/mux"
)

// system is the API's own resources: /v1/health and /v1/whoami.
type system struct {
	errorWriter
}

func (h system) routes(r *mux.Router) {
	r.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}).Methods(http.MethodGet)
	r.HandleFunc("/whoami", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, principalFrom(r.Context()))
	}).Methods(http.MethodGet)
}
