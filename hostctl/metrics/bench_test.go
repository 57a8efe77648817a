package metrics_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/metrics"
	"github.com/vmeta/vmeta/hostctl/view"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// scrapeFixture is n instances in a real bolt store, half of them
// host-a's and half host-b's, with host-a's metrics on a registry of
// their own (only the instance collector: what a scrape of a busy host
// pays for).
type scrapeFixture struct {
	ctl     *controller.Controller
	st      store.Store
	handler http.Handler
	reg     *prometheus.Registry
}

func newScrapeFixture(tb testing.TB, n int) *scrapeFixture {
	tb.Helper()
	ctx := context.Background()
	dir := tb.TempDir()
	st := stores.BoltIn(tb, dir)
	log := slog.New(slog.DiscardHandler)
	a := controller.New(st, controller.Options{DataDir: filepath.Join(dir, "a"), Host: "host-a", Logger: log})
	b := controller.New(st, controller.Options{DataDir: filepath.Join(dir, "b"), Host: "host-b", Logger: log})
	for i := range n {
		c := a
		if i%2 == 1 {
			c = b
		}
		name := fmt.Sprintf("vm-%04d", i)
		addr := fmt.Sprintf("10.%d.%d.%d", 1+i/65536, (i/256)%256, i%256)
		mac := fmt.Sprintf("52:54:00:00:%02x:%02x", (i/256)%256, i%256)
		if _, err := c.Apply(ctx, fmt.Appendf(nil, spec, name, addr, mac)); err != nil {
			tb.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	m := metrics.New()
	if err := m.Register(reg, metrics.Sources{Instances: a, Store: st, States: view.States{Host: "host-a"}}); err != nil {
		tb.Fatal(err)
	}
	return &scrapeFixture{ctl: a, st: st, reg: reg, handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})}
}

func (f *scrapeFixture) scrape(tb testing.TB) {
	rec := httptest.NewRecorder()
	f.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		tb.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
}

func loadAverage() string {
	out, err := exec.Command("uptime").Output()
	if err != nil {
		return "uptime: " + err.Error()
	}
	return strings.TrimSpace(string(out))
}

// BenchmarkScrape: one scrape of hostctl's instance metrics over 1,000
// instances in a real bolt store, nothing changed between scrapes. It
// reports the process CPU time per scrape next to ns/op and prints the
// load average.
func BenchmarkScrape(b *testing.B) {
	f := newScrapeFixture(b, 1000)
	f.scrape(b) // the first scrape fills what a scrape keeps
	b.Logf("load: %s", loadAverage())
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		f.scrape(b)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}
