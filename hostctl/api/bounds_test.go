package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/clip"
	"github.com/vmeta/vmeta/internal/logbudget"
)

// syncLog is a log buffer several handlers write to at once.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestOversizedRequestValuesBounded: no request value is copied whole into
// a log line or an error body. 20 unauthenticated requests with a 1 MB
// path on the TCP listener add a few KB of log (before: 19 MiB); the unix
// socket's 404 neither echoes the path whole nor logs it twice; past the
// burst, unauthenticated refusals from one peer are not logged one by
// one.
func TestOversizedRequestValuesBounded(t *testing.T) {
	ctl, _ := newController(t)
	var logs syncLog
	log := slog.New(slog.NewTextHandler(&logs, nil))
	tt := newTestTokens(t)
	tcp := httptest.NewServer(api.NewHandler(ctlServices(ctl), log, tt.auth))
	t.Cleanup(tcp.Close)
	local := httptest.NewServer(api.Handler(ctlServices(ctl), log))
	t.Cleanup(local.Close)

	long := "/v1/instances/" + strings.Repeat("a", 1<<20)
	const n = 20
	for i := range n {
		code, body := do(t, http.MethodGet, tcp.URL+long, "", "")
		if code != http.StatusUnauthorized || len(body) > 1024 {
			t.Fatalf("request %d without a token: %d, %d-byte body", i, code, len(body))
		}
	}
	perReq := logs.Len() / n
	t.Logf("TCP listener: %d unauthenticated requests with a 1 MB path: %d bytes of log, %d bytes per request", n, logs.Len(), perReq)
	if perReq > 2048 {
		t.Errorf("%d bytes of log per request", perReq)
	}

	before := logs.Len()
	code, body := do(t, http.MethodGet, local.URL+"/v1/nothing/"+strings.Repeat("b", 1<<20), "", "")
	line := logs.String()[before:]
	if code != http.StatusNotFound || len(body) > 1024 {
		t.Errorf("unix socket, unknown 1 MB path: %d, %d-byte body: %.300s", code, len(body), body)
	}
	if run := strings.Repeat("b", clip.Log); strings.Count(line, run) > 2 || len(line) > 2048 {
		t.Errorf("unix socket: a %d-byte log line for a 1 MB path", len(line))
	}
	t.Logf("unix socket: a 1 MB unknown path: a %d-byte body, a %d-byte log line", len(body), len(line))

	// An authenticated caller asking for an instance with a 1 MB name:
	// the 404 names it cut.
	before = logs.Len()
	code, body = do(t, http.MethodGet, tcp.URL+long, tt.alice, "")
	if line := logs.String()[before:]; code != http.StatusNotFound || len(body) > 1024 || len(line) > 2048 {
		t.Errorf("member, 1 MB instance name: %d, %d-byte body, %d-byte log line", code, len(body), len(line))
	}

	// A flood from one peer: a burst of lines, not one per request.
	before = logs.Len()
	for range 200 {
		do(t, http.MethodGet, tcp.URL+"/v1/instances", "wrong", "")
	}
	flood := logs.String()[before:]
	if lines := strings.Count(flood, "admin request refused"); lines > logbudget.DefaultBurst+5 {
		t.Errorf("200 refused requests from one peer wrote %d log lines", lines)
	}
}

// TestFieldValueBounded: an invalid spec's fields[].value is cut, as the
// message is: a 900 KB user_data does not come back whole.
func TestFieldValueBounded(t *testing.T) {
	ctl, _ := newController(t)
	srv := httptest.NewServer(api.Handler(ctlServices(ctl), slog.New(slog.DiscardHandler)))
	t.Cleanup(srv.Close)
	spec, _ := json.Marshal(map[string]any{"name": "a", "user_data": strings.Repeat("u", 900<<10)})
	code, body := do(t, http.MethodPost, srv.URL+"/v1/instances", "", string(spec))
	var e types.Error
	if err := json.Unmarshal([]byte(body), &e); err != nil || code != http.StatusBadRequest || len(e.Fields) == 0 {
		t.Fatalf("%d %.300s (%v)", code, body, err)
	}
	if len(body) > 2048 {
		t.Errorf("a %d-byte error body for a 900 KB user_data: %.300s", len(body), body)
	}
	for _, f := range e.Fields {
		if s, ok := f.Value.(string); ok && len(s) > 4*clip.Value+64 {
			t.Errorf("fields[].value of %s is %d bytes", f.Field, len(s))
		}
	}
}

// TestFreeFormBoundsAsMember: a member (a token over TCP) applying a
// deeply nested or a wide vendor_data is refused with the limit in the
// error, and the answers are compact JSON, not indented.
func TestFreeFormBoundsAsMember(t *testing.T) {
	ctl, _ := newController(t)
	tt := newTestTokens(t)
	srv := httptest.NewServer(api.NewHandler(ctlServices(ctl), slog.New(slog.DiscardHandler), tt.auth))
	t.Cleanup(srv.Close)

	deep := `{"name":"deep","vendor_data":` + strings.Repeat(`{"a":`, 9000) + "1" + strings.Repeat("}", 9000) + `}`
	code, body := do(t, http.MethodPost, srv.URL+"/v1/instances", tt.alice, deep)
	if code != http.StatusBadRequest || !strings.Contains(body, "more than 32 levels") || len(body) > 4096 {
		t.Errorf("9,000 levels: %d, %d bytes: %.400s", code, len(body), body)
	}
	var wide strings.Builder
	wide.WriteString(`{"name":"wide","vendor_data":{`)
	for i := range 20000 {
		if i > 0 {
			wide.WriteByte(',')
		}
		fmt.Fprintf(&wide, `"k%d":[1,2,3]`, i)
	}
	wide.WriteString("}}")
	code, body = do(t, http.MethodPost, srv.URL+"/v1/instances", tt.alice, wide.String())
	if code != http.StatusBadRequest || !strings.Contains(body, "at most 65535 bytes") {
		t.Errorf("wide vendor_data: %d %.400s", code, body)
	}

	nested := `{"name":"ok","vendor_data":` + strings.Repeat(`{"a":`, 20) + "1" + strings.Repeat("}", 20) + `}`
	if code, body = do(t, http.MethodPost, srv.URL+"/v1/instances", tt.alice, nested); code != http.StatusOK {
		t.Fatalf("20 levels: %d %.400s", code, body)
	}
	code, body = do(t, http.MethodGet, srv.URL+"/v1/instances", tt.alice, "")
	if code != http.StatusOK || strings.Contains(body, "\n ") || strings.Count(body, "\n") != 1 {
		t.Errorf("GET /v1/instances is not compact JSON: %.400s", body)
	}
}
