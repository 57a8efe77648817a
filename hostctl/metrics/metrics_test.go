package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/hosts"
	"github.com/vmeta/vmeta/hostctl/metrics"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/faults"
	"github.com/vmeta/vmeta/hostctl/parts/vmstate"
	"github.com/vmeta/vmeta/hostctl/view"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
	"github.com/vmeta/vmeta/internal/testenv/stores"
	"github.com/vmeta/vmeta/server"
)

// scrape GETs /metrics from the metadata server's operator handler (the
// listener hostctl serves its metrics on) and parses the text format.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d\n%s", rec.Code, rec.Body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("/metrics is not valid text exposition: %v", err)
	}
	return fams
}

// value returns the value of the sample of family name whose labels are
// exactly labels ("k=v" pairs), and whether there is one.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		var got []string
		for _, lp := range m.GetLabel() {
			got = append(got, lp.GetName()+"="+lp.GetValue())
		}
		if strings.Join(got, ",") != strings.Join(labels, ",") {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func openStore(t *testing.T) (*bolt.Store, string) {
	t.Helper()
	dir := t.TempDir()
	st := stores.BoltIn(t, dir)
	return st, dir
}

const spec = `
name: %s
addresses: [%s]
disks: [{name: vda}]
nics: [{mac: "%s", tag: front}]
`

// TestScrape: two hosts share a real (embedded) store; host-a's metrics,
// served on the metadata server's operator handler, show both hosts'
// instances and heartbeats, host-a's operations and store errors, the
// libvirt state, and the Go and process collectors.
func TestScrape(t *testing.T) {
	ctx := context.Background()
	st, dir := openStore(t)
	log := slog.New(slog.DiscardHandler)

	reg := server.NewRegistry()
	md := server.New(st, server.Options{Registry: reg, Logger: log, Metrics: true})
	m := metrics.New()
	ctlStore := m.Store(st)
	// The parts the daemon registers that keep an instance's state (read
	// at every scrape, like the records themselves).
	vs, fl := vmstate.New(ctlStore, "host-a"), faults.New(ctlStore, log)
	parts := []part.Part{vs, fl}
	a := controller.New(ctlStore, controller.Options{DataDir: filepath.Join(dir, "a"), Host: "host-a", Logger: log, Observe: m.Observe, Parts: parts})
	b := controller.New(st, controller.Options{DataDir: filepath.Join(dir, "b"), Host: "host-b", Logger: log})

	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	connected := true
	if err := m.Register(reg, metrics.Sources{
		Instances: a,
		Store:     ctlStore,
		States:    view.States{Host: "host-a", Faults: fl, Kept: vs}, // as the daemon wires them
		Hosts: func(ctx context.Context) ([]hosts.Status, error) {
			return hosts.List(ctx, ctlStore, now, time.Minute)
		},
		LibvirtConnected: func() bool { return connected },
	}); err != nil {
		t.Fatal(err)
	}

	for i, name := range []string{"web-1", "web-2"} {
		if _, err := a.Apply(ctx, fmt.Appendf(nil, spec, name, fmt.Sprintf("10.1.0.%d", i+1), fmt.Sprintf("52:54:00:00:00:0%d", i+1))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Apply(ctx, fmt.Appendf(nil, spec, "db-1", "10.1.0.9", "52:54:00:00:00:09")); err != nil {
		t.Fatal(err)
	}
	// Refused: the address is db-1's; and web-9 does not exist.
	if _, err := a.Apply(ctx, fmt.Appendf(nil, spec, "web-3", "10.1.0.9", "52:54:00:00:00:03")); err == nil {
		t.Fatal("apply of a taken address succeeded")
	}
	if err := a.Delete(ctx, "web-9"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete of a missing instance: %v", err)
	}
	if err := a.Delete(ctx, "web-2"); err != nil {
		t.Fatal(err)
	}
	// host-a beat just now, host-b five minutes ago.
	for _, hb := range []struct {
		host string
		at   time.Time
	}{{"host-a", now.Add(-2 * time.Second)}, {"host-b", now.Add(-5 * time.Minute)}} {
		at := hb.at
		if err := (&hosts.Beater{Store: st, Host: hb.host, Version: "test", Now: func() time.Time { return at }}).Beat(ctx); err != nil {
			t.Fatal(err)
		}
	}

	fams := scrape(t, md.MetricsHandler())
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"vmeta_host_instances", []string{"host=host-a", "state=" + metrics.StateUnobserved}, 1},
		{"vmeta_host_instances", []string{"host=host-b", "state=" + metrics.StateUnobserved}, 1},
		{"vmeta_host_heartbeat_age_seconds", []string{"host=host-a"}, 2},
		{"vmeta_host_heartbeat_age_seconds", []string{"host=host-b"}, 300},
		{"vmeta_host_up", []string{"host=host-a"}, 1},
		{"vmeta_host_up", []string{"host=host-b"}, 0},
		{"vmeta_hostctl_operation_duration_seconds", []string{"op=apply"}, 3},
		{"vmeta_hostctl_operation_failures_total", []string{"op=apply"}, 1},
		{"vmeta_hostctl_operation_duration_seconds", []string{"op=delete"}, 2},
		{"vmeta_hostctl_operation_failures_total", []string{"op=delete"}, 1},
		{"vmeta_hostctl_operation_duration_seconds", []string{"op=attach_disk"}, 0},
		{"vmeta_hostctl_operation_failures_total", []string{"op=start"}, 0},
		{"vmeta_hostctl_store_errors_total", nil, 0}, // not found and conflicts are answers
		{"vmeta_hostctl_libvirt_connected", nil, 1},
		{"vmeta_metadata_store_up", nil, 1},
	} {
		if got, ok := value(fams, tc.name, tc.labels...); !ok || got != tc.want {
			t.Errorf("%s%v = %v (present %v), want %v", tc.name, tc.labels, got, ok, tc.want)
		}
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if fams[name] == nil {
			t.Errorf("no %s", name)
		}
	}
	if n := len(fams["vmeta_host_instances"].GetMetric()); n != 2 {
		t.Errorf("%d instance series, want 2 (web-2 is deleted)", n)
	}

	// libvirtd goes away; then the store does.
	connected = false
	if got, _ := value(scrape(t, md.MetricsHandler()), "vmeta_hostctl_libvirt_connected"); got != 0 {
		t.Errorf("libvirt_connected = %v while disconnected", got)
	}
	st.Close()
	if _, err := a.Get(ctx, "web-1"); err == nil {
		t.Fatal("read from a closed store succeeded")
	}
	// The failed reads cost their own metrics only. Counted: Get's read,
	// and the scrape's own — which the registry may gather after or
	// before it reads the counter (collectors run concurrently), so the
	// count is checked on the next scrape, which comes after both.
	fams = scrape(t, md.MetricsHandler())
	if got, _ := value(scrape(t, md.MetricsHandler()), "vmeta_hostctl_store_errors_total"); got < 2 {
		t.Errorf("store errors = %v, want >= 2", got)
	}
	if _, ok := value(fams, "vmeta_host_instances", "host=host-a", "state="+metrics.StateUnobserved); ok {
		t.Errorf("instances reported from a closed store")
	}
	if fams["vmeta_hostctl_operation_duration_seconds"] == nil || fams["go_goroutines"] == nil {
		t.Errorf("a failing collector took the other metrics down")
	}
}

// TestNoSources: without scrape-time sources only the operation and
// store metrics are registered; libvirt's gauge is absent (no
// hypervisor), not 0.
func TestNoSources(t *testing.T) {
	reg := server.NewRegistry()
	md := server.New(nil, server.Options{Registry: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	m := metrics.New()
	if err := m.Register(reg, metrics.Sources{}); err != nil {
		t.Fatal(err)
	}
	m.Observe("start", 3*time.Second, nil)
	m.Observe("rescue", time.Second, errors.New("boom")) // not in Operations: resolved on use
	fams := scrape(t, md.MetricsHandler())
	for _, absent := range []string{"vmeta_hostctl_libvirt_connected", "vmeta_host_instances", "vmeta_host_up", "vmeta_host_heartbeat_age_seconds"} {
		if fams[absent] != nil {
			t.Errorf("%s present without its source", absent)
		}
	}
	if got, _ := value(fams, "vmeta_hostctl_operation_duration_seconds", "op=start"); got != 1 {
		t.Errorf("start count %v", got)
	}
	if got, _ := value(fams, "vmeta_hostctl_operation_failures_total", "op=rescue"); got != 1 {
		t.Errorf("rescue failures %v", got)
	}
	// The histogram buckets hold the observed seconds.
	for _, m := range fams["vmeta_hostctl_operation_duration_seconds"].GetMetric() {
		if m.GetLabel()[0].GetValue() != "start" {
			continue
		}
		if s := m.GetHistogram().GetSampleSum(); s != 3 {
			t.Errorf("start sum %v s, want 3", s)
		}
	}
	// A second registration on the same registry is refused.
	if err := m.Register(reg, metrics.Sources{}); err == nil {
		t.Errorf("registered twice")
	}
}
