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

// TestRefusalSummary: a 400 listing fields carries, beside the message, a
// summary naming what was refused — the flavor, the instance spec — for
// the client's heading (issue 20, item 20).
func TestRefusalSummary(t *testing.T) {
	c, _ := newController(t)
	tt := newTestTokens(t)
	base := newTestServer(t, api.NewHandler(ctlServices(c), slog.New(slog.DiscardHandler), tt.auth))
	for _, tc := range []struct {
		path, body, summary, field string
	}{
		{"/v1/flavors", `{"name": "f1", "vcpus": 5000, "ram": 512, "disk": 1}`, "create flavor f1: invalid flavor", "vcpus"},
		{"/v1/instances", "name: web-1\nnics: [{mac: \"52:54:00:aa:bb\"}]\n", "invalid instance spec", "nics[0].mac"},
	} {
		req, _ := http.NewRequest(http.MethodPost, base+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer "+tt.root)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e types.Error
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("POST %s: %d %v", tc.path, resp.StatusCode, err)
		}
		if !strings.HasSuffix(e.Summary, tc.summary) || len(e.Fields) == 0 || e.Fields[0].Field != tc.field || !strings.HasPrefix(e.Message, e.Summary+": ") {
			t.Errorf("POST %s: summary %q, fields %+v, message %q; want the summary %q", tc.path, e.Summary, e.Fields, e.Message, tc.summary)
		}
	}
}
