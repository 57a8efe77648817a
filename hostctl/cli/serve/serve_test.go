package serve

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/cli"
	"github.com/vmeta/vmeta/hostctl/daemon"
	"github.com/vmeta/vmeta/internal/testenv"
)

// TestServeMetadataWiring runs `hostctl serve` in-process with the
// metadata-service flags: the token key is created in the data
// directory (0600), the guest listener serves the applied instance with
// its limits and tokens, and the operator listener serves /metrics and
// /healthz.
func TestServeMetadataWiring(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "web.json")
	os.WriteFile(spec, []byte(`{"name":"web-1","hostname":"web-1","project_id":"demo","addresses":["127.0.0.1"]}`), 0o600)
	secret := filepath.Join(dir, "proxy.secret")
	os.WriteFile(secret, []byte("wiring-proxy-s3cret\n"), 0o600)
	dataDir := filepath.Join(dir, "data")

	var stdout, stderr testenv.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"serve", "--data-dir", dataDir, "--socket", filepath.Join(dir, "hostctl.sock"),
			"--metadata-listen", "127.0.0.1:0", "--metadata-metrics-listen", "127.0.0.1:0",
			"--metadata-trusted-proxies", "192.0.2.0/24", "--metadata-proxy-secret-file", secret,
			"--metadata-token-policy", "required", "--metadata-access-log=true", "--apply", spec,
		}, cli.Env{Stdout: &stdout, Stderr: &stderr, Stdin: strings.NewReader("")})
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d:\n%s", code, stderr.String())
		}
	})
	re := regexp.MustCompile(` metadata=(\S+) .*metadata_metrics=(\S+)`)
	var md, metrics string
	for deadline := time.Now().Add(20 * time.Second); ; {
		if m := re.FindStringSubmatch(stderr.String()); m != nil && strings.Contains(stdout.String(), "applied") {
			md, metrics = m[1], m[2]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s\n%s", stderr.String(), stdout.String())
		}
		time.Sleep(10 * time.Millisecond)
	}

	key, err := os.Stat(daemon.TokenKeyFilePath(dataDir))
	if err != nil || key.Mode().Perm() != 0o600 {
		t.Fatalf("token key file in the data directory: %v %v", key, err)
	}
	do := func(method, url string, h http.Header) (int, string) {
		t.Helper()
		return testenv.HTTP(t, method, url, h, "")
	}
	// The required token policy is in force.
	if code, _ := do("GET", "http://"+md+"/latest/meta-data/hostname", nil); code != 401 {
		t.Errorf("without token: %d, want 401", code)
	}
	code, tok := do("PUT", "http://"+md+"/latest/api/token", http.Header{"X-Aws-Ec2-Metadata-Token-Ttl-Seconds": {"60"}})
	if code != 200 {
		t.Fatalf("token: %d", code)
	}
	if code, body := do("GET", "http://"+md+"/latest/meta-data/hostname", http.Header{"X-Aws-Ec2-Metadata-Token": {tok}}); code != 200 || body != "web-1.novalocal" {
		t.Errorf("with token: %d %q", code, body)
	}
	if code, body := do("GET", "http://"+metrics+"/metrics", nil); code != 200 || !strings.Contains(body, `vmeta_metadata_requests_total{code="200",path_class="token"} 1`) {
		t.Errorf("metrics: %d\n%s", code, body)
	}
	if code, _ := do("GET", "http://"+metrics+"/healthz", nil); code != 200 {
		t.Errorf("healthz: %d", code)
	}
	if !strings.Contains(stderr.String(), `msg="metadata request"`) {
		t.Error("no access log line")
	}
	for _, secret := range []string{"wiring-proxy-s3cret", tok} {
		if strings.Contains(stderr.String()+stdout.String(), secret) {
			t.Errorf("output holds a secret (%.8s…)", secret)
		}
	}
}

func TestServeMetadataFlagErrors(t *testing.T) {
	dir := t.TempDir()
	var stderr testenv.SyncBuffer
	code := run(t.Context(), []string{"serve", "--data-dir", dir, "--socket", filepath.Join(dir, "s.sock"),
		"--metadata-listen", "127.0.0.1:0", "--metadata-token-policy", "maybe"}, cli.Env{Stdout: io.Discard, Stderr: &stderr})
	if code == 0 || !strings.Contains(stderr.String(), "optional or required") {
		t.Errorf("bad token policy: exit %d\n%s", code, stderr.String())
	}
}

// The daemons this package's tests run in-process must not reach the
// host's libvirtd: `hostctl serve` defaults to --virt auto, which picks
// libvirt wherever its socket exists.
func init() { os.Setenv(daemon.VirtEnv, "none") }

// run is hostctl with the serve command, as the binary has it.
func run(ctx context.Context, args []string, env cli.Env) int {
	return cli.Run(ctx, args, env, Command())
}
