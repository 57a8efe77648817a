package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// oaValidator checks requests and answers against an OpenAPI document
// (kin-openapi's gorilla/mux router and openapi3filter validators, which
// validate OpenAPI 3.1 schemas as JSON Schema 2020-12). What it finds is
// recorded, not returned: a test of the handler it wraps goes on, and the
// package's TestMain fails the run on any violation (openapi_main_test.go).
//
// The rules:
//   - a request for a documented operation: its answer's status must be
//     one the operation lists, and its headers and body must match that
//     status's description;
//   - such a request the document refuses (a bad parameter or body) must
//     not succeed: the answer must be an error (the tests send bad
//     requests on purpose, and the daemon must refuse what the document
//     refuses);
//   - a request no operation takes (an unknown path, a method the path
//     does not take) must be answered 401, 404 or 405 with an Error body;
//   - HEAD is validated as the GET it stands for, without a body.
type oaValidator struct {
	doc    *openapi3.T
	router routers.Router

	inflight sync.WaitGroup // exchanges being served or checked

	mu         sync.Mutex
	violations []string
	requests   int
	seen       map[string]int // operationId: requests validated
}

// newOAValidator loads the document (YAML or JSON) and validates it.
func newOAValidator(doc []byte) (*oaValidator, error) {
	loader := openapi3.NewLoader()
	t, err := loader.LoadFromData(doc)
	if err != nil {
		return nil, fmt.Errorf("load the OpenAPI document: %w", err)
	}
	if err := t.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("the OpenAPI document is invalid: %w", err)
	}
	// The servers name the unix socket and the TCP listener; requests are
	// matched on their paths alone.
	routed := *t
	routed.Servers = nil
	r, err := gorillamux.NewRouter(&routed)
	if err != nil {
		return nil, fmt.Errorf("route the OpenAPI document: %w", err)
	}
	return &oaValidator{doc: t, router: r, seen: map[string]int{}}, nil
}

// Wait waits up to d for the exchanges under way to be checked, and
// reports whether they were.
func (v *oaValidator) Wait(d time.Duration) bool {
	done := make(chan struct{})
	go func() { v.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// Violations returns what the validator found so far.
func (v *oaValidator) Violations() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.violations)
}

func (v *oaValidator) report(r *http.Request, status int, format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.violations = append(v.violations, fmt.Sprintf("%s %s → %d: %s", r.Method, r.URL.RequestURI(), status, fmt.Sprintf(format, args...)))
}

// wrap returns next, its requests and answers checked.
func (v *oaValidator) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v.inflight.Add(1)
		defer v.inflight.Done()
		var body []byte
		if r.Body != nil {
			var err error
			body, err = io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		tee := &teeWriter{ResponseWriter: w}
		next.ServeHTTP(tee, r)
		v.check(r, body, tee.status(), w.Header(), tee.body.Bytes())
	})
}

// check validates one exchange.
func (v *oaValidator) check(r *http.Request, reqBody []byte, status int, header http.Header, respBody []byte) {
	v.mu.Lock()
	v.requests++
	v.mu.Unlock()
	probe := r.Clone(context.Background())
	head := r.Method == http.MethodHead
	if head {
		probe.Method = http.MethodGet
	}
	route, params, err := v.router.FindRoute(probe)
	if err != nil {
		// Not an operation of the document: the daemon must refuse it
		// as one of its routes' absence.
		if !slices.Contains([]int{http.StatusUnauthorized, http.StatusNotFound, http.StatusMethodNotAllowed}, status) {
			v.report(r, status, "no operation of the document takes this request (%v), but the daemon answered it", err)
			return
		}
		if !head {
			if err := v.validateError(respBody); err != nil {
				v.report(r, status, "an answer to an undocumented request: %v", err)
			}
		}
		return
	}
	v.mu.Lock()
	v.seen[route.Operation.OperationID]++
	v.mu.Unlock()

	probe.Body = io.NopCloser(bytes.NewReader(reqBody))
	probe.ContentLength = int64(len(reqBody))
	setContentType(probe, reqBody)
	in := &openapi3filter.RequestValidationInput{
		Request:    probe,
		PathParams: params,
		Route:      route,
		Options: &openapi3filter.Options{
			AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
			MultiError:         true,
		},
	}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	if reqErr != nil && status < 300 {
		v.report(r, status, "the document refuses this request, but the daemon answered it: %v", reqErr)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(respBody)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: head},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		v.report(r, status, "the answer does not match %s: %v", route.Operation.OperationID, err)
	}
}

// validateError checks an answer's body against the Error schema.
func (v *oaValidator) validateError(body []byte) error {
	var x any
	if err := json.Unmarshal(body, &x); err != nil {
		return fmt.Errorf("the body is not JSON: %w", err)
	}
	return v.doc.Components.Schemas["Error"].Value.VisitJSON(x, openapi3.EnableJSONSchema2020())
}

// setContentType names the media type the daemon reads a body as: it
// ignores Content-Type, except for multipart (an image import) — a body
// is JSON, and an instance spec YAML unless it is JSON (the document
// says so; the Go client sends no Content-Type).
func setContentType(r *http.Request, body []byte) {
	if len(bytes.TrimSpace(body)) == 0 {
		r.Header.Del("Content-Type")
		r.Body, r.ContentLength = http.NoBody, 0
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err == nil && strings.HasPrefix(mt, "multipart/") {
		return
	}
	if json.Valid(body) {
		r.Header.Set("Content-Type", "application/json")
	} else {
		r.Header.Set("Content-Type", "application/yaml")
	}
}

// teeWriter passes an answer on and keeps a copy.
type teeWriter struct {
	http.ResponseWriter
	code int
	body bytes.Buffer
}

func (t *teeWriter) WriteHeader(code int) {
	if t.code == 0 {
		t.code = code
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *teeWriter) Write(b []byte) (int, error) {
	if t.code == 0 {
		t.code = http.StatusOK
	}
	t.body.Write(b)
	return t.ResponseWriter.Write(b)
}

func (t *teeWriter) status() int {
	if t.code == 0 {
		return http.StatusOK
	}
	return t.code
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (t *teeWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }
