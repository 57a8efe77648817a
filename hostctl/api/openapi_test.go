package api

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"sigs.k8s.io/yaml"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// routeDiff compares the operations of doc with the routes the router
// serves: the routes doc lacks, the operations no route serves, and the
// query parameters a route matches on that its operation does not
// document, each as "METHOD /path".
func routeDiff(doc *openapi3.T, routes []Route) (undocumented, unserved, queries []string) {
	vars := regexp.MustCompile(`\{([^:}]+)(:[^}]*)?\}`)
	served := map[string]bool{}
	for _, r := range routes {
		key := r.Method + " " + vars.ReplaceAllString(r.Path, "{$1}")
		served[key] = true
		op := doc.Paths.Find(vars.ReplaceAllString(r.Path, "{$1}"))
		var o *openapi3.Operation
		if op != nil {
			o = op.GetOperation(r.Method)
		}
		if o == nil {
			undocumented = append(undocumented, key)
			continue
		}
		for _, q := range r.Queries {
			name, _, _ := strings.Cut(q, "=")
			if o.Parameters.GetByInAndName(openapi3.ParameterInQuery, name) == nil && op.Parameters.GetByInAndName(openapi3.ParameterInQuery, name) == nil {
				queries = append(queries, key+"?"+name)
			}
		}
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if key := method + " " + path; !served[key] {
				unserved = append(unserved, key)
			}
		}
	}
	slices.Sort(undocumented)
	slices.Sort(unserved)
	return slices.Compact(undocumented), unserved, queries
}

func loadDoc(t *testing.T, doc []byte) *openapi3.T {
	t.Helper()
	v, err := newOAValidator(doc)
	if err != nil {
		t.Fatal(err)
	}
	return v.doc
}

// TestOpenAPIRoutes: every route gorilla/mux serves is an operation of
// openapi.yaml, every operation is a route, and a query a route matches
// on is a documented parameter — and a document that lacks a route, or
// has one too many, is caught.
func TestOpenAPIRoutes(t *testing.T) {
	routes := ServedRoutes()
	if len(routes) < 50 {
		t.Fatalf("the walk found %d routes: %v", len(routes), routes)
	}
	undocumented, unserved, queries := routeDiff(loadDoc(t, OpenAPIYAML), routes)
	for _, r := range undocumented {
		t.Errorf("the router serves %s, which openapi.yaml does not describe", r)
	}
	for _, r := range unserved {
		t.Errorf("openapi.yaml describes %s, which the router does not serve", r)
	}
	for _, q := range queries {
		t.Errorf("the router matches on query parameter %s, which openapi.yaml does not describe", q)
	}

	// The same check on documents that are wrong.
	for _, tc := range []struct {
		name   string
		mutate func(doc map[string]any)
		want   string
	}{
		{"a route missing", func(doc map[string]any) { delete(paths(doc), "/v1/whoami") }, "undocumented GET /v1/whoami"},
		{"a method missing", func(doc map[string]any) { delete(pathItem(doc, "/v1/instances/{name}/disks"), "delete") }, "undocumented DELETE /v1/instances/{name}/disks"},
		{"a route too many", func(doc map[string]any) {
			paths(doc)["/v1/instances/{name}/teleport"] = map[string]any{
				"parameters": []any{map[string]any{"$ref": "#/components/parameters/InstanceName"}},
				"post":       map[string]any{"responses": map[string]any{"200": map[string]any{"description": "x"}}},
			}
		}, "unserved POST /v1/instances/{name}/teleport"},
		{"a method too many", func(doc map[string]any) {
			pathItem(doc, "/v1/hosts")["delete"] = map[string]any{"responses": map[string]any{"204": map[string]any{"description": "x"}}}
		}, "unserved DELETE /v1/hosts"},
		{"a matched query missing", func(doc map[string]any) {
			op := pathItem(doc, "/v1/instances/{name}")["delete"].(map[string]any)
			delete(op, "parameters")
		}, "query DELETE /v1/instances/{name}?force_from_store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, s, q := routeDiff(loadDoc(t, mutated(t, tc.mutate)), routes)
			var got []string
			for _, x := range u {
				got = append(got, "undocumented "+x)
			}
			for _, x := range s {
				got = append(got, "unserved "+x)
			}
			for _, x := range q {
				got = append(got, "query "+x)
			}
			if !slices.Equal(got, []string{tc.want}) {
				t.Errorf("differences %q, want %q", got, tc.want)
			}
		})
	}
}

// mutated returns openapi.yaml as JSON, changed by mutate.
func mutated(t *testing.T, mutate func(doc map[string]any)) []byte {
	t.Helper()
	js, err := yaml.YAMLToJSON(OpenAPIYAML)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatal(err)
	}
	mutate(doc)
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func paths(doc map[string]any) map[string]any { return doc["paths"].(map[string]any) }

func pathItem(doc map[string]any, path string) map[string]any {
	return paths(doc)[path].(map[string]any)
}

func schemaOf(doc map[string]any, name string) map[string]any {
	return doc["components"].(map[string]any)["schemas"].(map[string]any)[name].(map[string]any)
}

// TestOpenAPIValidatorCatchesWrongDoc: the validator the package's
// tests run under (TestMain sets it as NewHandler's hook) finds nothing
// on the document as it is, and finds each of these mistakes in a
// document: a wrong answer body, an undocumented property, a status not
// listed, a route missing, a request the document refuses but the
// daemon takes. The requests go through NewHandler itself, with the
// hook set to the wrong document's validator.
func TestOpenAPIValidatorCatchesWrongDoc(t *testing.T) {
	exchange := func(t *testing.T, doc []byte) []string {
		t.Helper()
		v, err := newOAValidator(doc)
		if err != nil {
			t.Fatal(err)
		}
		saved := handlerHook
		handlerHook = v.wrap
		h := NewHandler(Services{}, slog.New(slog.DiscardHandler), localAuth{})
		handlerHook = saved
		srv := httptest.NewServer(h)
		for _, rq := range []struct{ method, path, body string }{
			{http.MethodGet, "/v1/health", ""},
			{http.MethodGet, "/v1/whoami", ""},
			{http.MethodGet, "/v1/flavors", ""},
			{http.MethodPost, "/v1/instances/x/stop", `{"timeout_seconds": 1}`},
			{http.MethodGet, "/v1/nope", ""},
			{http.MethodHead, "/v1/health", ""},
		} {
			req, err := http.NewRequest(rq.method, srv.URL+rq.path, strings.NewReader(rq.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		srv.Close() // waits for the handlers, which validate after answering
		return v.Violations()
	}
	if vs := exchange(t, OpenAPIYAML); len(vs) != 0 {
		t.Fatalf("the document as it is: %q", vs)
	}
	for _, tc := range []struct {
		name   string
		mutate func(doc map[string]any)
		want   string
	}{
		{"wrong body", func(doc map[string]any) {
			ok := pathItem(doc, "/v1/health")["get"].(map[string]any)["responses"].(map[string]any)["200"].(map[string]any)
			ok["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)["properties"] = map[string]any{"status": map[string]any{"const": "fine"}}
		}, "GET /v1/health → 200: the answer does not match health"},
		{"undocumented property", func(doc map[string]any) {
			delete(schemaOf(doc, "Principal")["properties"].(map[string]any), "role")
			schemaOf(doc, "Principal")["required"] = []string{"name"}
		}, "GET /v1/whoami → 200: the answer does not match whoAmI"},
		{"status not listed", func(doc map[string]any) {
			delete(pathItem(doc, "/v1/flavors")["get"].(map[string]any)["responses"].(map[string]any), "501")
		}, "GET /v1/flavors → 501: the answer does not match listFlavors: status is not supported"},
		{"error body", func(doc map[string]any) {
			schemaOf(doc, "Error")["required"] = []string{"error", "code"}
		}, "POST /v1/instances/x/stop → 501: the answer does not match stopInstance"},
		{"route missing", func(doc map[string]any) { delete(paths(doc), "/v1/whoami") }, "GET /v1/whoami → 200: no operation of the document takes this request"},
		{"request refused", func(doc map[string]any) {
			pathItem(doc, "/v1/health")["get"].(map[string]any)["parameters"] = []any{map[string]any{"name": "verbose", "in": "query", "required": true, "schema": map[string]any{"type": "string"}}}
		}, "GET /v1/health → 200: the document refuses this request, but the daemon answered it"},
		{"HEAD as its GET", func(doc map[string]any) {
			pathItem(doc, "/v1/health")["get"].(map[string]any)["responses"] = map[string]any{"201": map[string]any{"description": "x"}}
		}, "HEAD /v1/health → 200: the answer does not match health: status is not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := exchange(t, mutated(t, tc.mutate))
			if !slices.ContainsFunc(vs, func(s string) bool { return strings.HasPrefix(s, tc.want) }) {
				t.Errorf("violations %q, want one starting %q", vs, tc.want)
			}
		})
	}
}

// localAuth authenticates every caller as an administrator, as the unix
// socket does.
type localAuth struct{}

func (localAuth) Authenticate(*http.Request) (types.Principal, error) {
	return types.Principal{Name: "root", Role: types.RoleAdmin}, nil
}

// TestOpenAPIHookApplied: NewHandler applies the validating hook
// TestMain set, so the package's tests are validated — the API tests
// build their servers with NewHandler or Handler.
func TestOpenAPIHookApplied(t *testing.T) {
	if handlerHook == nil || oaTests == nil {
		t.Fatal("no validating hook: TestMain did not set it")
	}
	oaTests.mu.Lock()
	before := oaTests.seen["openAPI"]
	oaTests.mu.Unlock()
	srv := httptest.NewServer(Handler(Services{}, slog.New(slog.DiscardHandler)))
	resp, err := http.Get(srv.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	srv.Close() // waits for the handler, which validates after answering
	oaTests.mu.Lock()
	after := oaTests.seen["openAPI"]
	oaTests.mu.Unlock()
	if after != before+1 {
		t.Errorf("the hook validated %d requests of GET /v1/openapi.json, want 1", after-before)
	}
}

// TestOpenAPIServed: GET /v1/openapi.json is the embedded document as
// JSON, which loads and validates as OpenAPI 3.1.
func TestOpenAPIServed(t *testing.T) {
	srv := httptest.NewServer(Handler(Services{}, slog.New(slog.DiscardHandler)))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/openapi.json: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	want, err := yaml.YAMLToJSON(OpenAPIYAML)
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != string(want) {
		t.Error("GET /v1/openapi.json is not openapi.yaml as JSON")
	}
	doc := loadDoc(t, body)
	if doc.OpenAPI != "3.1.0" || !doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi: %q, want 3.1.0", doc.OpenAPI)
	}
}

// schemaTypes are the Go types of the document's schemas: the bodies
// hostctl/api/types encodes (answers) and decodes (requests).
var schemaTypes = map[string]struct {
	typ     reflect.Type
	request bool // decoded only: which fields are required is the document's to say
}{
	"Error":              {reflect.TypeFor[types.Error](), false},
	"FieldError":         {reflect.TypeFor[types.FieldError](), false},
	"Instance":           {reflect.TypeFor[types.Instance](), false},
	"HostDevice":         {reflect.TypeFor[types.HostDevice](), false},
	"Transport":          {reflect.TypeFor[types.Transport](), false},
	"GuestDevice":        {reflect.TypeFor[types.GuestDevice](), false},
	"BlockDevice":        {reflect.TypeFor[types.BlockDevice](), false},
	"DiskKeyRotation":    {reflect.TypeFor[types.DiskKeyRotation](), false},
	"InstanceSpec":       {reflect.TypeFor[types.InstanceSpec](), false},
	"SpecDisk":           {reflect.TypeFor[types.Disk](), false},
	"SpecNIC":            {reflect.TypeFor[types.NIC](), false},
	"ForceDeleteResult":  {reflect.TypeFor[types.ForceDeleteResult](), false},
	"StopRequest":        {reflect.TypeFor[types.StopRequest](), true},
	"RebootRequest":      {reflect.TypeFor[types.RebootRequest](), true},
	"DiskRequest":        {reflect.TypeFor[types.DiskRequest](), true},
	"NICRequest":         {reflect.TypeFor[types.NICRequest](), true},
	"ResizeRequest":      {reflect.TypeFor[types.ResizeRequest](), true},
	"RebuildRequest":     {reflect.TypeFor[types.RebuildRequest](), true},
	"SnapshotRequest":    {reflect.TypeFor[types.SnapshotRequest](), true},
	"RescueRequest":      {reflect.TypeFor[types.RescueRequest](), true},
	"MigrateRequest":     {reflect.TypeFor[types.MigrateRequest](), true},
	"Migration":          {reflect.TypeFor[types.Migration](), false},
	"EvacuateRequest":    {reflect.TypeFor[types.EvacuateRequest](), true},
	"Evacuation":         {reflect.TypeFor[types.Evacuation](), false},
	"Flavor":             {reflect.TypeFor[types.Flavor](), false},
	"FlavorRequest":      {reflect.TypeFor[types.Flavor](), true},
	"Image":              {reflect.TypeFor[types.Image](), false},
	"ImageImport":        {reflect.TypeFor[types.ImageImport](), true},
	"Secret":             {reflect.TypeFor[types.Secret](), false},
	"SecretRequest":      {reflect.TypeFor[types.SecretRequest](), true},
	"KeyPolicy":          {reflect.TypeFor[types.KeyPolicy](), false},
	"KeyStatus":          {reflect.TypeFor[types.KeyStatus](), false},
	"KeyProgress":        {reflect.TypeFor[types.KeyProgress](), false},
	"KeyReport":          {reflect.TypeFor[types.KeyReport](), false},
	"KeyRotation":        {reflect.TypeFor[types.KeyRotation](), false},
	"KeyPruneRequest":    {reflect.TypeFor[types.KeyPruneRequest](), true},
	"KeyReveal":          {reflect.TypeFor[types.KeyReveal](), false},
	"Share":              {reflect.TypeFor[types.Share](), false},
	"ShareCreateRequest": {reflect.TypeFor[types.ShareCreateRequest](), true},
	"CephAuthRequest":    {reflect.TypeFor[types.CephAuthRequest](), true},
	"CephAuthResult":     {reflect.TypeFor[types.CephAuthResult](), false},
	"KeyHolder":          {reflect.TypeFor[types.KeyHolder](), false},
	"ShareBody":          {reflect.TypeFor[types.ShareBody](), false},
	"SharesBody":         {reflect.TypeFor[types.SharesBody](), false},
	"ShareMapping":       {reflect.TypeFor[types.ShareMapping](), false},
	"ServerShareAttach":  {reflect.TypeFor[types.ServerShareAttach](), true},
	"ServerShareRequest": {reflect.TypeFor[types.ServerShareRequest](), true},
	"ServerShareBody":    {reflect.TypeFor[types.ServerShareBody](), false},
	"ServerSharesBody":   {reflect.TypeFor[types.ServerSharesBody](), false},
	"Device":             {reflect.TypeFor[types.Device](), false},
	"HookResult":         {reflect.TypeFor[types.HookResult](), false},
	"DeviceList":         {reflect.TypeFor[types.DeviceList](), false},
	"HostStatus":         {reflect.TypeFor[types.HostStatus](), false},
	"Event":              {reflect.TypeFor[types.Event](), false},
	"Principal":          {reflect.TypeFor[types.Principal](), false},
}

// neverNull are the fields encoding/json could write as null that the
// API never leaves nil, so the document does not say null.
var neverNull = map[string]string{
	"Instance.spec": "every instance the API answers with has its spec",
}

// TestOpenAPISchemasMatchTypes: each schema of openapi.yaml has exactly
// the properties of its Go type's json tags, nested structs included; in
// an answer, the fields without omitempty are required and those that
// are never omitted are; a slice, map or pointer without omitempty
// allows null; and each property's type is its field's.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	doc := loadDoc(t, OpenAPIYAML)
	for name := range doc.Components.Schemas {
		if _, ok := schemaTypes[name]; !ok && name != "KeyClass" {
			t.Errorf("schema %s: no Go type to check it against (schemaTypes)", name)
		}
	}
	for name, st := range schemaTypes {
		ref := doc.Components.Schemas[name]
		if ref == nil {
			t.Errorf("schema %s: missing", name)
			continue
		}
		for _, p := range compareSchema(name, ref.Value, st.typ, st.request) {
			t.Error(p)
		}
	}

	// A wrong document is caught.
	wrong := loadDoc(t, mutated(t, func(doc map[string]any) {
		props := schemaOf(doc, "Instance")["properties"].(map[string]any)
		props["revision"] = map[string]any{"type": "string"}
		delete(props, "warnings")
		schemaOf(doc, "Device")["properties"].(map[string]any)["traits"] = map[string]any{"type": "array", "items": map[string]any{"type": "string"}}
		schemaOf(doc, "Principal")["required"] = []string{"name", "role", "project"}
	}))
	var got []string
	for _, name := range []string{"Instance", "Device", "Principal"} {
		got = append(got, compareSchema(name, wrong.Components.Schemas[name].Value, schemaTypes[name].typ, false)...)
	}
	slices.Sort(got)
	want := []string{
		"Device.traits: a []string without omitempty can be null; the schema does not allow it",
		"Instance.revision: a int64 is integer; the schema says string",
		"Instance.warnings: in the Go type, not in the schema",
		"Principal.project: omitted when empty, but the schema requires it",
	}
	if !slices.Equal(got, want) {
		t.Errorf("a wrong document:\n got %q\nwant %q", got, want)
	}
}

// compareSchema compares schema s with Go struct type typ (name is where
// in the document, for the messages).
func compareSchema(name string, s *openapi3.Schema, typ reflect.Type, request bool) []string {
	var out []string
	fields := jsonFields(typ)
	for prop := range s.Properties {
		if _, ok := fields[prop]; !ok {
			out = append(out, fmt.Sprintf("%s.%s: in the schema, not in the Go type", name, prop))
		}
	}
	for prop, f := range fields {
		at := name + "." + prop
		ref := s.Properties[prop]
		if ref == nil {
			out = append(out, at+": in the Go type, not in the schema")
			continue
		}
		p := ref.Value
		required := slices.Contains(s.Required, prop)
		if !request {
			if f.optional && required {
				out = append(out, at+": omitted when empty, but the schema requires it")
			}
			if !f.optional && !required {
				out = append(out, at+": always in the answer, but the schema does not require it")
			}
		}
		ft := f.typ
		nullable := !f.optional && (ft.Kind() == reflect.Slice || ft.Kind() == reflect.Map || ft.Kind() == reflect.Pointer)
		if nullable && !p.Type.IncludesNull() && neverNull[at] == "" && ft != reflect.TypeFor[json.RawMessage]() {
			out = append(out, fmt.Sprintf("%s: a %s without omitempty can be null; the schema does not allow it", at, ft))
		}
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		want := jsonType(ft)
		if want == "" {
			continue // any JSON value
		}
		if !p.Type.Includes(want) {
			out = append(out, fmt.Sprintf("%s: a %s is %s; the schema says %s", at, f.typ, want, strings.Join(p.Type.Slice(), ", ")))
			continue
		}
		switch {
		case ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Time]():
			out = append(out, compareSchema(at, p, ft, request)...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct && p.Items != nil:
			out = append(out, compareSchema(at+"[]", p.Items.Value, ft.Elem(), request)...)
		case ft.Kind() == reflect.Slice && p.Items != nil:
			if w := jsonType(ft.Elem()); w != "" && !p.Items.Value.Type.Includes(w) {
				out = append(out, fmt.Sprintf("%s[]: a %s is %s; the schema says %s", at, ft.Elem(), w, strings.Join(p.Items.Value.Type.Slice(), ", ")))
			}
		}
	}
	slices.Sort(out)
	return out
}

type jsonField struct {
	typ      reflect.Type
	optional bool // omitempty or omitzero
}

// jsonFields are the fields encoding/json writes for struct type typ, by
// name, embedded structs' fields included.
func jsonFields(typ reflect.Type) map[string]jsonField {
	out := map[string]jsonField{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			for n, jf := range jsonFields(f.Type) {
				out[n] = jf
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = jsonField{typ: f.Type, optional: slices.ContainsFunc(strings.Split(opts, ","), func(o string) bool { return o == "omitempty" || o == "omitzero" })}
	}
	return out
}

// jsonType is the JSON Schema type encoding/json writes a t as, "" for
// any value.
func jsonType(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[time.Time](), t == reflect.TypeFor[[]byte]():
		return "string"
	case t == reflect.TypeFor[json.RawMessage]():
		return ""
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	}
	return ""
}
