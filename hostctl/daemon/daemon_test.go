package daemon_test

import (
	"errors"
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
	b := daemon.RunInBackground(cfg)
	b.StopAtEnd(t)
	re := regexp.MustCompile(`metadata_metrics=(\S+)`)
	var addr string
	b.WaitFor(t, 20*time.Second, "start", func() error {
		m := re.FindStringSubmatch(b.Stderr.String())
		if m == nil || !strings.Contains(b.Stdout.String(), "applied") {
			return errors.New("no metadata_metrics address logged and no instance applied yet")
		}
		addr = m[1]
		return nil
	})
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
