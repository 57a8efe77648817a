package metadatakeys

// Fixtures for the tests that run the real vmeta-metadata binary on a
// real Redis: build it, seed the store, start it, read its metrics, make
// guest and proxy requests.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
	"github.com/vmeta/vmeta/server"
)

const (
	guestUUID = "6d1f3e2a-4b5c-4d6e-8f70-1a2b3c4d5e6f"
	guestAddr = "127.0.0.1" // the guest calls from here
	proxyAddr = "127.0.0.2" // the metadata proxy calls from here
)

var replicaBin struct {
	once sync.Once
	path string
	err  error
}

// buildReplica builds vmeta-metadata from this checkout (once per test
// binary).
func buildReplica(t *testing.T) string {
	t.Helper()
	replicaBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "vmeta-keyfollow-bin-")
		if err != nil {
			replicaBin.err = err
			return
		}
		bin := filepath.Join(dir, "vmeta-metadata")
		cmd := exec.Command(testenv.GoTool(), "build", "-o", bin, "github.com/vmeta/vmeta/server/cmd/vmeta-metadata")
		if out, err := cmd.CombinedOutput(); err != nil {
			replicaBin.err = fmt.Errorf("go build vmeta-metadata: %w\n%s", err, out)
			return
		}
		replicaBin.path = bin
	})
	if replicaBin.err != nil {
		t.Fatal(replicaBin.err)
	}
	return replicaBin.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if replicaBin.path != "" {
		os.RemoveAll(filepath.Dir(replicaBin.path))
	}
	os.Exit(code)
}

// seed publishes an instance reachable from guestAddr.
func seed(t *testing.T, st store.Instances) {
	t.Helper()
	in := &model.Instance{Name: "kf-web", UUID: guestUUID, Hostname: "kf-web", ProjectID: "demo", Addresses: []string{guestAddr}}
	in.Normalize()
	if err := in.Validate(); err != nil {
		t.Fatal(err)
	}
	tr, err := metadata.Render(in, metadata.Options{})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := tr.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Put(t.Context(), store.Instance{Name: in.Name, UUID: in.UUID, ProjectID: "demo", Addresses: in.Addresses, Spec: []byte(`{}`)},
		store.Document{InstanceUUID: in.UUID, ProjectID: "demo", Addresses: in.Addresses, Tree: enc}, -1); err != nil {
		t.Fatal(err)
	}
}

type replica struct {
	p       *testenv.Process
	cmd     *exec.Cmd
	listen  string
	metrics string
}

var (
	listenRE  = regexp.MustCompile(`listen=(\S+)`)
	metricsRE = regexp.MustCompile(`metrics=(\S+)`)
)

// startReplica runs vmeta-metadata on storeURL with the key files and
// extra flags, and waits for its start-up line.
func startReplica(t *testing.T, storeURL, proxyFile, tokenFile string, extra ...string) *replica {
	t.Helper()
	args := append([]string{"--store", storeURL, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--trusted-proxies", proxyAddr + "/32", "--proxy-secret-file", proxyFile, "--token-key-file", tokenFile,
		"--token-policy", "optional", "--rate-limit", "0", "--access-log=false", "--sweep-interval", "0"}, extra...)
	cmd := exec.Command(buildReplica(t), args...)
	cmd.Env = testenv.ChildEnv(nil)
	p, err := testenv.StartProcess(t, "vmeta-metadata", cmd)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{p: p, cmd: cmd}
	t.Cleanup(p.Stop)
	if err := p.WaitReady(30*time.Second, 5*time.Millisecond, func() error {
		m := listenRE.FindStringSubmatch(p.Output())
		if m == nil {
			return fmt.Errorf("no start-up line yet")
		}
		r.listen = m[1]
		r.metrics = metricsRE.FindStringSubmatch(p.Output())[1]
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, p.Output())
	}
	return r
}

// metric returns the value of a metric line of the replica's /metrics
// that starts with prefix (name and labels); -1 when absent.
func (r *replica) metric(t *testing.T, prefix string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + r.metrics + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, prefix+" ") {
			v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(l, prefix)), 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", l, err)
			}
			return v
		}
	}
	return -1
}

// waitMetric waits until the metric satisfies ok (the bound only ends a
// broken test).
func (r *replica) waitMetric(t *testing.T, prefix string, ok func(float64) bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		v := r.metric(t, prefix)
		if ok(v) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v after a minute\n%s", prefix, v, r.p.Output())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func keyGauge(name, keys string) string { return name + `{keys="` + keys + `"}` }

// client makes requests to the replica from a loopback address of its
// own.
func client(from string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}}
}

// do makes a request and returns the status and body.
func do(ctx context.Context, c *http.Client, method, url string, h http.Header) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return 0, "", err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func proxyHeaders(secret []byte) http.Header {
	return http.Header{
		"X-Instance-Id":           {guestUUID},
		"X-Tenant-Id":             {"demo"},
		"X-Instance-Id-Signature": {server.Signature(secret, guestUUID)},
	}
}

// writeKeyFile writes a key file as an operator would (whole, 0600).
func writeKeyFile(t *testing.T, path string, entries ...server.KeyEntry) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", server.FormatKeyFile(entries), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// allKeys collects every key a key file has held (to check logs).
type allKeys struct {
	mu   sync.Mutex
	keys map[string]bool
}

func (a *allKeys) add(t *testing.T, paths ...string) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.keys == nil {
		a.keys = map[string]bool{}
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		es, err := server.ParseKeyFile(data)
		if err != nil {
			continue
		}
		for _, e := range es {
			a.keys[string(e.Key)] = true
		}
	}
}

func (a *allKeys) checkNotIn(t *testing.T, what, text string) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	for k := range a.keys {
		if strings.Contains(text, k) {
			t.Errorf("%s holds a key (%.6s…)", what, k)
		}
	}
}
