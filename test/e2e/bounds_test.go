package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/auth"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/testenv"
)

// boundsDaemon starts `hostctl serve --virt none` with the TCP admin
// listener and a member token of project a; it returns the daemon, the
// listener's base URL and the member's token.
func boundsDaemon(t *testing.T) (*daemon, string, string) {
	t.Helper()
	tok, entry, err := auth.NewToken("alice", types.RoleMember, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal([]auth.TokenEntry{entry})
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(tokens, b, 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	d := startDaemon(t, daemonOptions{Args: []string{"--virt", "none", "--admin-listen", addr, "--admin-tokens-file", tokens, "--metadata-access-log=true"}})
	return d, "http://" + addr, tok
}

// rssKiB is a process's resident set size (VmRSS), in KiB.
func rssKiB(t *testing.T, pid int) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				t.Fatalf("VmRSS: %q", rest)
			}
			return n
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// call sends one request (a new connection each) and returns the status
// and the body.
func call(t *testing.T, c *http.Client, method, url, tok, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %.80s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestFreeFormSpecsBoundedAsMember (issue 21.3): deep and wide specs sent
// by a member over TCP to a real `hostctl serve` are refused at once
// with the limit in the answer, nothing is stored, the daemon's memory
// stays bounded, and the API answers in compact JSON.
func TestFreeFormSpecsBoundedAsMember(t *testing.T) {
	t.Parallel()
	d, base, tok := boundsDaemon(t)
	c := &http.Client{Timeout: 30 * time.Second}
	pid := d.proc.Pid()
	before := rssKiB(t, pid)

	deep := `{"name":"deep","vendor_data":` + strings.Repeat(`{"a":`, 9000) + "1" + strings.Repeat("}", 9000) + `}`
	var wide strings.Builder
	wide.WriteString(`{"name":"wide","vendor_data":{`)
	for i := 0; wide.Len() < 900<<10; i++ {
		if i > 0 {
			wide.WriteByte(',')
		}
		fmt.Fprintf(&wide, `"k%d":{"a":[1,{"b":[2]}]}`, i)
	}
	wide.WriteString("}}")
	// Deep and wide in every free-form field the schema lets through.
	deepMeta := `{"name":"deepmeta","meta":{"k":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}}`
	for _, tt := range []struct{ name, spec, want string }{
		{"9,000 levels of vendor_data", deep, "more than 32 levels"},
		{"900 KB of vendor_data", wide.String(), "at most 65535 bytes"},
		{"5,000 levels in meta", deepMeta, "more than 32 levels"},
	} {
		for range 5 {
			start := time.Now()
			code, body := call(t, c, http.MethodPost, base+"/v1/instances", tok, tt.spec)
			if code != http.StatusBadRequest || !strings.Contains(string(body), tt.want) || len(body) > 4096 {
				t.Fatalf("%s (%d bytes): %d, %d-byte answer: %.400s", tt.name, len(tt.spec), code, len(body), body)
			}
			t.Logf("%s (%d-byte spec): refused in %v with a %d-byte answer", tt.name, len(tt.spec), time.Since(start).Round(time.Millisecond), len(body))
		}
	}
	code, body := call(t, c, http.MethodGet, base+"/v1/instances", tok, "")
	if code != http.StatusOK || string(body) != "[]\n" {
		t.Fatalf("GET /v1/instances after the refusals: %d %.300s", code, body)
	}
	nested := `{"name":"ok","vendor_data":` + strings.Repeat(`{"a":`, 30) + "1" + strings.Repeat("}", 30) + `}`
	if code, body = call(t, c, http.MethodPost, base+"/v1/instances", tok, nested); code != http.StatusOK {
		t.Fatalf("30 levels: %d %.300s", code, body)
	}
	code, body = call(t, c, http.MethodGet, base+"/v1/instances", tok, "")
	if code != http.StatusOK || strings.Count(string(body), "\n") != 1 {
		t.Fatalf("GET /v1/instances is not compact JSON: %d %.300s", code, body)
	}
	after := rssKiB(t, pid)
	t.Logf("daemon RSS: %d KiB before, %d KiB after 15 refused specs", before, after)
	// Before the bounds, the deep spec alone took the daemon from 34 MB
	// to 1.49 GB; the refusals may cost a few times the specs' size.
	if after-before > 128<<10 {
		t.Errorf("daemon RSS grew by %d KiB", after-before)
	}
}

// TestUnauthenticatedFloodLogBounded (issue 21.5): a flood of oversized
// unauthenticated requests against a real `hostctl serve` — 1 MB paths
// without a token on the TCP admin listener, an unknown 1 MB path on the
// unix socket, 2,000 metadata requests from an address with no instance
// — adds a bounded amount of log.
func TestUnauthenticatedFloodLogBounded(t *testing.T) {
	t.Parallel()
	d, base, _ := boundsDaemon(t)
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

	// The admin listeners refuse a request line over 64 KiB (431) before
	// any handler; a shorter one without a token is unauthorized (401).
	path := "/v1/instances/" + strings.Repeat("a", 1_000_000)
	const n = 20
	before := len(d.Log())
	for i := range n {
		code, body := call(t, c, http.MethodGet, base+path, "", "")
		if (code != http.StatusUnauthorized && code != http.StatusRequestHeaderFieldsTooLarge) || len(body) > 1024 {
			t.Fatalf("request %d: %d, %d-byte answer", i, code, len(body))
		}
	}
	grown := len(d.Log()) - before
	t.Logf("TCP admin listener: %d requests with a 1 MB path and no token: %d bytes of log, %d bytes per request", n, grown, grown/n)
	if grown/n > 2048 {
		t.Errorf("%d bytes of log per request", grown/n)
	}

	unix := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", d.Socket)
		},
	}}
	before = len(d.Log())
	code, body := call(t, unix, http.MethodGet, "http://hostctl/v1/nothing/"+strings.Repeat("b", 1_000_000), "", "")
	grown = len(d.Log()) - before
	t.Logf("unix socket: an unknown 1 MB path: %d, a %d-byte answer, %d bytes of log", code, len(body), grown)
	if (code != http.StatusNotFound && code != http.StatusRequestHeaderFieldsTooLarge) || len(body) > 1024 || grown > 2048 {
		t.Errorf("unix socket, unknown 1 MB path: %d, %d-byte answer, %d bytes of log", code, len(body), grown)
	}

	// 2,000 metadata requests from an address that has no instance.
	const m = 2000
	before = len(d.Log())
	lines := strings.Count(d.Log(), "metadata request")
	dialer := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.9")}}
	md := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 1}}
	start := time.Now()
	for i := range m {
		if code, _ := call(t, md, http.MethodGet, d.URL()+"/openstack/latest/meta_data.json", "", ""); code != http.StatusNotFound && code != http.StatusTooManyRequests {
			t.Fatalf("metadata request %d: %d", i, code)
		}
	}
	took := time.Since(start)
	grown = len(d.Log()) - before
	written := strings.Count(d.Log(), "metadata request") - lines
	t.Logf("metadata service: %d requests from an address with no instance in %v: %d access-log lines, %d bytes of log, %.1f bytes per request", m, took.Round(time.Millisecond), written, grown, float64(grown)/m)
	// A burst of 20, then one a second.
	if limit := 20 + int(took/time.Second) + 2; written > limit {
		t.Errorf("%d access-log lines, want at most %d", written, limit)
	}
}
