package daemon_test

import (
	"context"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/daemon"
	"github.com/vmeta/vmeta/internal/testenv"
)

// TestServeMetrics: one scrape of the operator listener gets the
// metadata service's metrics, hostctl's own and the Go and process
// collectors.
func TestServeMetrics(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "web.json")
	if err := os.WriteFile(spec, []byte(`{"name":"web-1","addresses":["127.0.0.1"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var cfg daemon.Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse([]string{"--data-dir", filepath.Join(dir, "data"), "--socket", filepath.Join(dir, "hostctl.sock"),
		"--metadata-listen", "127.0.0.1:0", "--metadata-metrics-listen", "127.0.0.1:0", "--virt", "none", "--apply", spec}); err != nil {
		t.Fatal(err)
	}
	cfg.Metadata.TokenKeyFile = daemon.TokenKeyFilePath(cfg.DataDir)
	var stdout, stderr testenv.SyncBuffer
	cfg.Stdout, cfg.Stderr = &stdout, &stderr
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- daemon.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v\n%s", err, stderr.String())
		}
	})
	re := regexp.MustCompile(`metadata_metrics=(\S+)`)
	var addr string
	for deadline := time.Now().Add(20 * time.Second); ; {
		if m := re.FindStringSubmatch(stderr.String()); m != nil && strings.Contains(stdout.String(), "applied") {
			addr = m[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s\n%s", stderr.String(), stdout.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	for _, want := range []string{
		"\nvmeta_metadata_store_up 1\n",
		"\nvmeta_hostctl_operation_duration_seconds_count{op=\"apply\"} 1\n",
		"\nvmeta_hostctl_operation_failures_total{op=\"apply\"} 0\n",
		"\nvmeta_hostctl_store_errors_total 0\n",
		"\ngo_goroutines ",
		"\nprocess_cpu_seconds_total ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
		}
	}
	// The instance is this host's, whatever the host is called.
	if !regexp.MustCompile(`\nvmeta_host_instances\{host="[^"]*",state="unobserved"\} 1\n`).Match(body) {
		t.Errorf("/metrics lacks the instance in vmeta_host_instances")
	}
	if strings.Contains(string(body), "vmeta_hostctl_libvirt_connected") {
		t.Errorf("libvirt state reported with --virt none")
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}
