package metrics_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/metrics"
	"github.com/vmeta/vmeta/hostctl/view"
	"github.com/vmeta/vmeta/internal/store"
)

// readCounter is a store that counts the instance records read from it,
// by whoever reads them (the controller's ListAll included).
type readCounter struct {
	store.Store
	listed, read atomic.Int64
}

func (s *readCounter) Instances(ctx context.Context) ([]store.Instance, error) {
	is, err := s.Store.Instances(ctx)
	s.listed.Add(int64(len(is)))
	return is, err
}

func (s *readCounter) Instance(ctx context.Context, name string) (store.Instance, error) {
	s.read.Add(1)
	return s.Store.Instance(ctx, name)
}

func (s *readCounter) take() (listed, read int64) {
	return s.listed.Swap(0), s.read.Swap(0)
}

// TestScrapeReadsOnlyChanges: with the store given, a scrape reads no
// instance record when nothing changed (before, every scrape listed and
// decoded every instance); one record for a republished instance; none
// for a delete; every record again for a new instance (a listing is what
// names it). After each step the exposition is the one the controller's
// ListAll gives.
func TestScrapeReadsOnlyChanges(t *testing.T) {
	ctx := context.Background()
	st, dir := openStore(t)
	rc := &readCounter{Store: st}
	log := slog.New(slog.DiscardHandler)
	a := controller.New(rc, controller.Options{DataDir: filepath.Join(dir, "a"), Host: "host-a", Logger: log})
	b := controller.New(st, controller.Options{DataDir: filepath.Join(dir, "b"), Host: "host-b", Logger: log})
	n := 0
	apply := func(c *controller.Controller, name, disk string) {
		t.Helper()
		n++
		if _, err := c.Apply(ctx, fmt.Appendf(nil, "name: %s\naddresses: [10.3.0.%d]\ndisks: [{name: %s}]\n", name, n, disk)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a-1", "a-2", "a-3"} {
		apply(a, name, "vda")
	}
	apply(b, "b-1", "vda")
	apply(b, "b-2", "vda")

	reg := prometheus.NewRegistry()
	if err := metrics.New().Register(reg, metrics.Sources{Instances: a, Store: rc, States: view.States{Host: "host-a"}}); err != nil {
		t.Fatal(err)
	}
	scrape := func(step string, wantListed, wantRead int64, want map[string]int) {
		t.Helper()
		rc.take()
		var exp strings.Builder
		exp.WriteString("# HELP vmeta_host_instances Instance records in the store by owning host and domain state: the state libvirt reports for this host's instances (running, shutoff, missing, unknown, ...), \"unobserved\" where this host cannot see it (another host's instances; no hypervisor).\n# TYPE vmeta_host_instances gauge\n")
		for _, host := range []string{"host-a", "host-b"} {
			if want[host] > 0 {
				fmt.Fprintf(&exp, "vmeta_host_instances{host=%q,state=\"unobserved\"} %d\n", host, want[host])
			}
		}
		if err := testutil.GatherAndCompare(reg, strings.NewReader(exp.String()), "vmeta_host_instances"); err != nil {
			t.Errorf("%s: %v", step, err)
		}
		if listed, read := rc.take(); listed != wantListed || read != wantRead {
			t.Errorf("%s: the scrape listed %d instance records and read %d, want %d and %d", step, listed, read, wantListed, wantRead)
		}
		// The controller's own listing agrees.
		list := prometheus.NewRegistry()
		if err := metrics.New().Register(list, metrics.Sources{Instances: a}); err != nil {
			t.Fatal(err)
		}
		if err := testutil.GatherAndCompare(list, strings.NewReader(exp.String()), "vmeta_host_instances"); err != nil {
			t.Errorf("%s: ListAll: %v", step, err)
		}
		rc.take()
	}
	scrape("first scrape", 5, 0, map[string]int{"host-a": 3, "host-b": 2})
	scrape("nothing changed", 0, 0, map[string]int{"host-a": 3, "host-b": 2})
	scrape("nothing changed again", 0, 0, map[string]int{"host-a": 3, "host-b": 2})
	apply(a, "a-1", "vdb") // republished: a new revision
	apply(b, "b-1", "vdb")
	scrape("two republished", 0, 2, map[string]int{"host-a": 3, "host-b": 2})
	if err := a.Delete(ctx, "a-2"); err != nil {
		t.Fatal(err)
	}
	scrape("a-2 deleted", 0, 0, map[string]int{"host-a": 2, "host-b": 2})
	apply(b, "b-3", "vda")
	scrape("b-3 created", 5, 0, map[string]int{"host-a": 2, "host-b": 3})
	scrape("nothing changed after", 0, 0, map[string]int{"host-a": 2, "host-b": 3})
}

// onlyInstances registers only the collector of vmeta_host_instances.
type onlyInstances struct{ *prometheus.Registry }

func (r onlyInstances) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	c.Describe(ch)
	close(ch)
	for d := range ch {
		if strings.Contains(d.String(), `"vmeta_host_instances"`) {
			return r.Registry.Register(c)
		}
	}
	return nil
}

// TestScrapeAllocs: gathering vmeta_host_instances over 200 instances
// with nothing changed allocates less than once per instance: no
// instance is decoded, rendered or validated (before: about 300
// allocations per instance).
func TestScrapeAllocs(t *testing.T) {
	const n = 200
	f := newScrapeFixture(t, n)
	reg := prometheus.NewRegistry()
	if err := metrics.New().Register(onlyInstances{reg}, metrics.Sources{Instances: f.ctl, Store: f.st, States: view.States{Host: "host-a"}}); err != nil {
		t.Fatal(err)
	}
	gather := func() {
		fams, err := reg.Gather()
		if err != nil || len(fams) != 1 {
			t.Fatalf("gather: %d families, %v", len(fams), err)
		}
	}
	gather()
	allocs := testing.AllocsPerRun(5, gather)
	t.Logf("%.0f allocations per gather of %d unchanged instances", allocs, n)
	if allocs >= n {
		t.Errorf("%.0f allocations per gather of %d unchanged instances, want fewer than one per instance", allocs, n)
	}
}
