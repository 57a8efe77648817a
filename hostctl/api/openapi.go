package api

import (
	_ "embed"
	"fmt"
	"net/http"
	"sync"

	"github.com/gorilla/mux"
	"sigs.k8s.io/yaml"
)

// OpenAPIYAML is the OpenAPI 3.1 description of the admin API
// (openapi.yaml, hand-written), which GET /v1/openapi.json serves as
// JSON and the host package installs. The tests validate every request
// they make and every answer they get against it, and compare its
// operations with the router's routes (openapi_test.go).
//
//go:embed openapi.yaml
var OpenAPIYAML []byte

// OpenAPIJSON returns the document as JSON (converted once).
var OpenAPIJSON = sync.OnceValues(func() ([]byte, error) {
	b, err := yaml.YAMLToJSON(OpenAPIYAML)
	if err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	return b, nil
})

// openAPIRoutes adds GET /v1/openapi.json.
func (e errorWriter) openAPIRoutes(v1 *mux.Router) {
	v1.HandleFunc("/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		b, err := OpenAPIJSON()
		if err != nil {
			e.fail(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}).Methods(http.MethodGet)
}

// handlerHook, when set, wraps the handler NewHandler returns: the
// package's tests set it to validate every request and answer against
// the document (openapi_hook_test.go). Nil outside tests.
var handlerHook func(http.Handler) http.Handler
