package api_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/types"
)

// rawAPI serves the admin API over a real controller with two member
// tokens (projects a and b) and one instance, a-1 in project a; it returns
// a function that sends a raw request with one of the tokens, and the
// recording controller.
func rawAPI(t *testing.T) (do func(tok int, method, path, body string) (*http.Response, types.Error), ctl *recordingCtl) {
	t.Helper()
	c, _ := newController(t)
	ctl = &recordingCtl{instances: c}
	svcs := ctlServices(c)
	svcs.Power, svcs.Reboot, svcs.Hotplug = ctl, ctl, ctl
	log := slog.New(slog.DiscardHandler)
	tt := newTestTokens(t)
	toks := []string{"", tt.alice, tt.bob}
	srv := newTestServer(t, api.NewHandler(svcs, log, tt.auth))
	do = func(tok int, method, path, body string) (*http.Response, types.Error) {
		t.Helper()
		req, err := http.NewRequest(method, srv+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if toks[tok] != "" {
			req.Header.Set("Authorization", "Bearer "+toks[tok])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e types.Error
		if resp.StatusCode >= 300 {
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatalf("%s %s: %d with a body that is not a JSON error: %v", method, path, resp.StatusCode, err)
			}
		}
		return resp, e
	}
	if resp, e := do(1, http.MethodPost, "/v1/instances", "name: a-1\n"); resp.StatusCode != http.StatusOK {
		t.Fatalf("apply: %d %s", resp.StatusCode, e.Message)
	}
	return do, ctl
}

// TestMethodNotAllowed: a method a path does not take is 405 with the
// methods it does take in Allow, computed from the routes.
func TestMethodNotAllowed(t *testing.T) {
	do, ctl := rawAPI(t)
	for _, tc := range []struct {
		method, path, allow string
	}{
		{http.MethodPut, "/v1/instances", "GET, HEAD, POST"},
		{http.MethodDelete, "/v1/instances", "GET, HEAD, POST"},
		{http.MethodPost, "/v1/instances/a-1", "DELETE, GET, HEAD"},
		{http.MethodGet, "/v1/instances/a-1/start", "POST"},
		{http.MethodGet, "/v1/instances/a-1/disks", "DELETE, POST"},
		{http.MethodPatch, "/v1/instances/a-1/nics", "DELETE, POST"},
		{http.MethodPost, "/v1/instances/a-1/configdrive", "GET, HEAD"},
		{http.MethodPost, "/v1/whoami", "GET, HEAD"},
		// Project scoping runs only on a matched route: a wrong method on
		// another project's instance is 405 too, and nothing is looked up.
		{http.MethodGet, "/v1/instances/b-9/stop", "POST"},
	} {
		resp, e := do(1, tc.method, tc.path, "")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d Allow %q, want 405 Allow %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), tc.allow)
		}
		if !strings.Contains(e.Message, "not allowed") {
			t.Errorf("%s %s: error %q", tc.method, tc.path, e.Message)
		}
	}
	if len(ctl.calls) != 0 {
		t.Errorf("405s reached the controller: %v", ctl.calls)
	}
	// Without a valid token, a wrong method is 401: the routes are not
	// revealed to an unauthenticated caller.
	if resp, _ := do(0, http.MethodPut, "/v1/instances", ""); resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Allow") != "" {
		t.Errorf("PUT without a token: %d Allow %q, want 401 and no Allow", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// TestUnknownRoute: a path no route knows is a 404 with a JSON error
// naming it.
func TestUnknownRoute(t *testing.T) {
	do, _ := rawAPI(t)
	for _, path := range []string{"/", "/v1", "/v1/nope", "/v2/instances", "/v1/instances/a-1/frobnicate", "/v1/instances/a-1/disks/extra"} {
		resp, e := do(1, http.MethodGet, path, "")
		if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(e.Message, path) {
			t.Errorf("GET %s: %d %q %q, want a JSON 404 naming the path", path, resp.StatusCode, resp.Header.Get("Content-Type"), e.Message)
		}
	}
}

// TestProjectScopeMiddleware: every route under /v1/instances/{name}
// answers 404 to a member of another project, exactly as for an instance
// that does not exist, and the request reaches no handler.
func TestProjectScopeMiddleware(t *testing.T) {
	do, ctl := rawAPI(t)
	routes := []struct{ method, path, body string }{
		{http.MethodGet, "/v1/instances/a-1", ""},
		{http.MethodDelete, "/v1/instances/a-1", ""},
		{http.MethodGet, "/v1/instances/a-1/configdrive", ""},
		{http.MethodPost, "/v1/instances/a-1/start", ""},
		{http.MethodPost, "/v1/instances/a-1/stop", `{"timeout_seconds": 1}`},
		{http.MethodPost, "/v1/instances/a-1/reboot", `{"type": "HARD"}`},
		{http.MethodPost, "/v1/instances/a-1/disks", `{"tag": "x"}`},
		{http.MethodDelete, "/v1/instances/a-1/disks?tag=x", ""},
		{http.MethodPost, "/v1/instances/a-1/nics", `{"tag": "y"}`},
		{http.MethodDelete, "/v1/instances/a-1/nics?tag=y", ""},
	}
	for _, rt := range routes {
		resp, other := do(2, rt.method, rt.path, rt.body)
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("bob %s %s: %d, want 404", rt.method, rt.path, resp.StatusCode)
		}
		missing := strings.Replace(rt.path, "a-1", "zz-9", 1)
		resp, absent := do(1, rt.method, missing, rt.body)
		if resp.StatusCode != http.StatusNotFound || strings.ReplaceAll(absent.Message, "zz-9", "a-1") != other.Message {
			t.Errorf("%s %s: another project's instance says %q, a missing one %q (%d): they must look alike", rt.method, rt.path, other.Message, absent.Message, resp.StatusCode)
		}
	}
	if len(ctl.calls) != 0 {
		t.Errorf("refused requests reached the controller: %v", ctl.calls)
	}
	// The owner passes the middleware.
	if resp, e := do(1, http.MethodPost, "/v1/instances/a-1/start", ""); resp.StatusCode != http.StatusOK || len(ctl.calls) != 1 {
		t.Errorf("alice start: %d %s, calls %v", resp.StatusCode, e.Message, ctl.calls)
	}
	if resp, _ := do(1, http.MethodGet, "/v1/instances/a-1", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("alice get: %d", resp.StatusCode)
	}
}
