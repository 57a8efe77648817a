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
	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"
)

// oaValidator checks requests and answers against an OpenAPI document:
// kin-openapi's gorilla/mux router finds the operation, its
// openapi3filter validators check the parameters, the status, the
// headers and multipart bodies, and the JSON and YAML bodies are checked
// against their schemas as JSON Schema 2020-12 (OpenAPI 3.1's dialect;
// bodySchemas). What it finds is
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
	doc     *openapi3.T
	router  routers.Router
	schemas *bodySchemas

	inflight sync.WaitGroup // exchanges being served or checked

	mu         sync.Mutex
	violations []string
	requests   int
	seen       map[string]int // operationId: requests validated
}

// maxRoutedPath bounds the paths the validator routes.
const maxRoutedPath = 8 << 10

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
	js, err := yaml.YAMLToJSON(doc) // as written (JSON is YAML too)
	if err != nil {
		return nil, fmt.Errorf("the OpenAPI document as JSON: %w", err)
	}
	bs, err := newBodySchemas(js)
	if err != nil {
		return nil, err
	}
	return &oaValidator{doc: t, router: r, schemas: bs, seen: map[string]int{}}, nil
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
	uri := r.URL.RequestURI()
	if len(uri) > 200 {
		uri = fmt.Sprintf("%s… (%d bytes)", uri[:200], len(uri))
	}
	v.violations = append(v.violations, fmt.Sprintf("%s %s → %d: %s", r.Method, uri, status, fmt.Sprintf(format, args...)))
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
	if len(r.URL.Path) > maxRoutedPath {
		// The tests' oversized paths (1 MB): matching them against
		// every route takes seconds under -race. No operation takes
		// one: it must be refused, with an Error body.
		if status < 400 || status >= 500 {
			v.report(r, status, "a %d-byte path, answered", len(r.URL.Path))
		} else if err := v.validateError(respBody); err != nil && !head {
			v.report(r, status, "an answer to a %d-byte path: %v", len(r.URL.Path), err)
		}
		return
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
	multipartBody := setContentType(probe, reqBody)
	// kin-openapi checks the parameters, the media type of a multipart
	// body and its parts, the status and the headers; the JSON and YAML
	// bodies are checked here against their schemas, compiled once
	// (kin-openapi compiles a schema on every validation, which made the
	// package's tests four times slower under -race).
	in := &openapi3filter.RequestValidationInput{
		Request:    probe,
		PathParams: params,
		Route:      route,
		Options: &openapi3filter.Options{
			AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
			MultiError:         true,
			ExcludeRequestBody: !multipartBody,
		},
	}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	if reqErr == nil && !multipartBody {
		reqErr = v.requestBody(route.Operation, probe.Header.Get("Content-Type"), reqBody)
	}
	if reqErr != nil && status < 300 {
		v.report(r, status, "the document refuses this request, but the daemon answered it: %v", reqErr)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(respBody)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		v.report(r, status, "the answer does not match %s: %v", route.Operation.OperationID, err)
		return
	}
	if !head {
		if err := v.responseBody(route.Operation, status, header.Get("Content-Type"), respBody); err != nil {
			v.report(r, status, "the answer does not match %s: %v", route.Operation.OperationID, err)
		}
	}
}

// requestBody checks a (non-multipart) request body against op's.
func (v *oaValidator) requestBody(op *openapi3.Operation, contentType string, body []byte) error {
	if op.RequestBody == nil || op.RequestBody.Value == nil {
		return nil // a body is ignored (no test should send one, but none is refused)
	}
	rb := op.RequestBody.Value
	if len(body) == 0 {
		if rb.Required {
			return fmt.Errorf("the request body is required")
		}
		return nil
	}
	mt := rb.Content.Get(contentType)
	if mt == nil {
		return fmt.Errorf("the request body's media type %q is not documented", contentType)
	}
	if strings.Contains(contentType, "yaml") {
		js, err := yaml.YAMLToJSON(body)
		if err != nil {
			return fmt.Errorf("the request body is not YAML: %w", err)
		}
		body = js
	}
	if err := v.schemas.validate(mt.Schema, body); err != nil {
		return fmt.Errorf("the request body: %w", err)
	}
	return nil
}

// responseBody checks an answer's body against the description of its
// status (which ValidateResponse found).
func (v *oaValidator) responseBody(op *openapi3.Operation, status int, contentType string, body []byte) error {
	ref := op.Responses.Status(status)
	if ref == nil || ref.Value == nil {
		return fmt.Errorf("status %d is not documented", status)
	}
	content := ref.Value.Content
	if len(content) == 0 {
		if len(body) > 0 {
			return fmt.Errorf("status %d has no body, but the answer has %d bytes", status, len(body))
		}
		return nil
	}
	mt := content.Get(contentType)
	if mt == nil {
		return fmt.Errorf("the answer's media type %q is not documented for status %d", contentType, status)
	}
	if mtype, _, _ := mime.ParseMediaType(contentType); mtype != "application/json" {
		return nil // a config drive image
	}
	if err := v.schemas.validate(mt.Schema, body); err != nil {
		return fmt.Errorf("the answer's body: %w", err)
	}
	return nil
}

// validateError checks an answer's body against the Error schema.
func (v *oaValidator) validateError(body []byte) error {
	return v.schemas.validate(v.doc.Components.Schemas["Error"], body)
}

// setContentType names the media type the daemon reads a body as: it
// ignores Content-Type, except for multipart (an image import) — a body
// is JSON, and an instance spec YAML unless it is JSON (the document
// says so; the Go client sends no Content-Type).
func setContentType(r *http.Request, body []byte) (multipart bool) {
	if len(bytes.TrimSpace(body)) == 0 {
		r.Header.Del("Content-Type")
		r.Body, r.ContentLength = http.NoBody, 0
		return false
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err == nil && strings.HasPrefix(mt, "multipart/") {
		return true
	}
	if json.Valid(body) {
		r.Header.Set("Content-Type", "application/json")
	} else {
		r.Header.Set("Content-Type", "application/yaml")
	}
	return false
}

// bodySchemas compiles the document's body schemas with
// santhosh-tekuri/jsonschema (JSON Schema 2020-12, the dialect of
// OpenAPI 3.1's schemas, and the validator kin-openapi itself uses for
// them), each once.
type bodySchemas struct {
	mu       sync.Mutex
	compiler *jsonschema.Compiler
	compiled map[*openapi3.SchemaRef]*jsonschema.Schema
}

// docURL names the document among the compiler's resources.
const docURL = "file:///openapi.json"

func newBodySchemas(docJSON []byte) (*bodySchemas, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(docJSON))
	if err != nil {
		return nil, fmt.Errorf("the OpenAPI document as JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(docURL, doc); err != nil {
		return nil, fmt.Errorf("the OpenAPI document as a JSON Schema resource: %w", err)
	}
	return &bodySchemas{compiler: c, compiled: map[*openapi3.SchemaRef]*jsonschema.Schema{}}, nil
}

// validate checks the JSON document body against ref.
func (b *bodySchemas) validate(ref *openapi3.SchemaRef, body []byte) error {
	sch, err := b.compile(ref)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return sch.Validate(inst)
}

// compile returns ref's schema compiled: a component by its place in the
// document, an inline schema as a resource of its own whose references
// point into the document.
func (b *bodySchemas) compile(ref *openapi3.SchemaRef) (*jsonschema.Schema, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if sch, ok := b.compiled[ref]; ok {
		return sch, nil
	}
	loc := docURL + ref.Ref
	if !strings.HasPrefix(ref.Ref, "#/") {
		js, err := json.Marshal(ref.Value)
		if err != nil {
			return nil, err
		}
		js = bytes.ReplaceAll(js, []byte(`"$ref":"#/`), []byte(`"$ref":"`+docURL+`#/`))
		inline, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
		if err != nil {
			return nil, err
		}
		loc = fmt.Sprintf("file:///inline/%d.json", len(b.compiled))
		if err := b.compiler.AddResource(loc, inline); err != nil {
			return nil, err
		}
	}
	sch, err := b.compiler.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("compile the schema %s: %w", loc, err)
	}
	b.compiled[ref] = sch
	return sch, nil
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
