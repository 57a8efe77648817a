package api_test

import (
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/hostctl/shares"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// routeVar is a {variable} of a route's path template.
var routeVar = regexp.MustCompile(`\{([^}:]+)(:[^}]*)?\}`)

// TestHeadOnEveryGETRoute: HEAD on the path of every GET route is
// answered as net/http's ServeMux answered it: the status and headers a
// GET gets, no body — not 405. A HEAD on a path no GET route takes is 405
// (or 404) as before, and a GET route's Allow lists HEAD, as net/http's
// does.
func TestHeadOnEveryGETRoute(t *testing.T) {
	c, dir := newController(t)
	tt := newTestTokens(t)
	log := slog.New(slog.DiscardHandler)
	st := stores.BoltAt(t, filepath.Join(t.TempDir(), "other.db"))
	engine := keyrotation.New(st, keyrotation.Options{Host: "h1", Version: "v1.0.0"})
	engine.Register(keyrotation.Proxy, &countRotator{})
	shareRoot := filepath.Join(dir, "shares")
	if err := os.MkdirAll(shareRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	svcs := ctlServices(c)
	svcs.Devices = &fakeDevices{}
	svcs.Keys = keyService{Engine: engine, secret: "proxy-secret-value"}
	svcs.Shares = shares.New(st, c, shares.Options{ShareRoot: shareRoot, Logger: log, ReconcileInterval: -1})
	base := newTestServer(t, api.NewHandler(svcs, log, tt.auth))
	do := func(method, path string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tt.root)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
	}
	if resp, body := do(http.MethodPost, "/v1/instances"); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("POST without a spec: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/instances", strings.NewReader("name: a-1\nproject_id: a\n"))
	req.Header.Set("Authorization", "Bearer "+tt.root)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("apply a-1: %v %v", resp, err)
	}

	values := map[string]string{"name": "a-1", "stream": "shares", "class": "proxy-secret", "address": "0000:3b:00.0"}
	tpls := api.RouteTemplates(svcs, http.MethodGet)
	if len(tpls) < 15 {
		t.Fatalf("only %d GET routes found: %v", len(tpls), tpls)
	}
	ok := 0
	for _, tpl := range tpls {
		path := routeVar.ReplaceAllStringFunc(tpl, func(v string) string {
			name := routeVar.FindStringSubmatch(v)[1]
			if x, found := values[name]; found {
				return x
			}
			return "x"
		})
		get, getBody := do(http.MethodGet, path)
		head, headBody := do(http.MethodHead, path)
		if head.StatusCode != get.StatusCode {
			t.Errorf("HEAD %s (route %s): %d, GET %d", path, tpl, head.StatusCode, get.StatusCode)
			continue
		}
		if len(headBody) != 0 {
			t.Errorf("HEAD %s: a body of %d bytes", path, len(headBody))
		}
		for _, h := range []string{"Content-Type", "Content-Length"} {
			if head.Header.Get(h) != get.Header.Get(h) {
				t.Errorf("HEAD %s: %s %q, GET %q", path, h, head.Header.Get(h), get.Header.Get(h))
			}
		}
		if get.StatusCode == http.StatusOK && len(getBody) > 0 {
			ok++
		}
	}
	if ok < 10 {
		t.Errorf("only %d of %d GET routes answered 200 with a body: the paths built from the templates miss their objects", ok, len(tpls))
	}

	// Not a GET route: 405 with Allow, no body; a GET route's Allow has HEAD.
	for _, tc := range []struct{ method, path, allow string }{
		{http.MethodHead, "/v1/instances/a-1/start", "POST"},
		{http.MethodPut, "/v1/instances", "GET, HEAD, POST"},
		{http.MethodPost, "/v1/whoami", "GET, HEAD"},
	} {
		resp, _ := do(tc.method, tc.path)
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d Allow %q, want 405 Allow %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), tc.allow)
		}
	}
	if resp, body := do(http.MethodHead, "/v1/nope"); resp.StatusCode != http.StatusNotFound || len(body) != 0 {
		t.Errorf("HEAD /v1/nope: %d, %d bytes", resp.StatusCode, len(body))
	}
}
