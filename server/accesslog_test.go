package server

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/logbudget"
)

// TestAccessLogRefusalsBounded: 2,000 requests from an address with no
// instance write a burst of access-log lines, not 2,000; a second later
// one more line says how many were suppressed; another peer and a known
// guest are logged as before; a 1 MB path is cut.
func TestAccessLogRefusalsBounded(t *testing.T) {
	var buf bytes.Buffer
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	clk := newClock("2026-01-01")
	o := testOptions(clk.Now)
	o.Logger = slog.New(slog.NewJSONHandler(&syncWriter{w: &buf, also: &testLogs}, nil))
	s := New(docs, o)

	const stranger = "192.0.2.99:4711"
	for i := range 2000 {
		if r := req(s, "GET", "/openstack/latest/meta_data.json", stranger, nil, ""); r.status != http.StatusNotFound {
			t.Fatalf("request %d: %d", i, r.status)
		}
	}
	lines := func() int { return strings.Count(buf.String(), `"msg":"metadata request"`) }
	if n := lines(); n != logbudget.DefaultBurst {
		t.Fatalf("2,000 refused requests from one address wrote %d access-log lines, want %d", n, logbudget.DefaultBurst)
	}
	t.Logf("2,000 refused requests from one address: %d lines, %d bytes of log", lines(), buf.Len())

	// A known guest's answered requests are all logged.
	for range 3 {
		req(s, "GET", "/openstack/latest/meta_data.json", richAddr+":1234", nil, "")
	}
	if n := lines(); n != logbudget.DefaultBurst+3 {
		t.Fatalf("a served guest's requests: %d lines, want %d", n, logbudget.DefaultBurst+3)
	}

	clk.Add(logbudget.DefaultInterval)
	buf.Reset()
	req(s, "GET", "/"+strings.Repeat("x", 1<<20), stranger, nil, "")
	line := buf.String()
	if want := fmt.Sprintf(`"suppressed":%d`, 2000-logbudget.DefaultBurst); !strings.Contains(line, want) {
		t.Errorf("the next line after the budget refilled does not count the suppressed ones:\n%.600s", line)
	}
	if len(line) > 2048 {
		t.Errorf("a request with a 1 MB path wrote a %d-byte log line", len(line))
	}
}
