package metrics_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/metrics"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/faults"
	"github.com/vmeta/vmeta/hostctl/parts/vmstate"
	"github.com/vmeta/vmeta/hostctl/view"
	"github.com/vmeta/vmeta/internal/store/bolt"
)

// goldenInstances is the exposition of vmeta_host_instances for the
// store goldenStore makes, as host-a (no hypervisor) serves it.
const goldenInstances = `# HELP vmeta_host_instances Instance records in the store by owning host and domain state: the state libvirt reports for this host's instances (running, shutoff, missing, unknown, ...), "unobserved" where this host cannot see it (another host's instances; no hypervisor).
# TYPE vmeta_host_instances gauge
vmeta_host_instances{host="host-a",state="error"} 1
vmeta_host_instances{host="host-a",state="rescue"} 1
vmeta_host_instances{host="host-a",state="unobserved"} 2
vmeta_host_instances{host="host-b",state="rescue"} 1
vmeta_host_instances{host="host-b",state="unobserved"} 2
`

// goldenStore fills st with host-a's and host-b's instances: host-a's
// a-err with a fault (error: it has no domain that runs), b-err with one
// too (another host's: unobserved all the same), a-resc and b-resc in
// rescue (a state record, whoever's it is). It returns host-a's
// controller.
func goldenStore(t *testing.T, st *bolt.Store, dir string) *controller.Controller {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	// The parts the daemon registers that keep an instance's state: the
	// shelved/rescued states (one per host) and the faults.
	parts := func(host string) []part.Part { return []part.Part{vmstate.New(st, host), faults.New(st, log)} }
	a := controller.New(st, controller.Options{DataDir: filepath.Join(dir, "a"), Host: "host-a", Logger: log, Parts: parts("host-a")})
	b := controller.New(st, controller.Options{DataDir: filepath.Join(dir, "b"), Host: "host-b", Logger: log, Parts: parts("host-b")})
	for i, name := range []string{"a-1", "a-2", "a-err", "a-resc", "b-1", "b-err", "b-resc"} {
		c := a
		if strings.HasPrefix(name, "b-") {
			c = b
		}
		if _, err := c.Apply(ctx, fmt.Appendf(nil, spec, name, fmt.Sprintf("10.2.0.%d", i+1), fmt.Sprintf("52:54:00:00:01:%02x", i+1))); err != nil {
			t.Fatal(err)
		}
	}
	// The records the controller keeps a fault and a state in
	// (hostctl/parts/faults, hostctl/parts/vmstate).
	for _, r := range []struct{ prefix, name, value string }{
		{"instance-fault/", "a-err", `{"reason":"test","since":"2026-03-01T12:00:00Z"}`},
		{"instance-fault/", "b-err", `{"reason":"test","since":"2026-03-01T12:00:00Z"}`},
		{"instance-vmstate/", "a-resc", `{"instance":"a-resc","state":"rescue","since":"2026-03-01T12:00:00Z"}`},
		{"instance-vmstate/", "b-resc", `{"instance":"b-resc","state":"rescue","since":"2026-03-01T12:00:00Z"}`},
	} {
		rec, err := st.Instance(ctx, r.name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.PutRecord(ctx, r.prefix+strings.ToLower(rec.UUID), []byte(r.value), 0); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// TestInstancesGolden: the exposition of vmeta_host_instances for a fixed
// store content, series, labels, help and values: the same whether it
// follows the store's feed (as hostctl serve has it) or lists every
// instance through the controller (no Store).
func TestInstancesGolden(t *testing.T) {
	for _, feed := range []bool{true, false} {
		t.Run(fmt.Sprintf("feed=%v", feed), func(t *testing.T) {
			st, dir := openStore(t)
			a := goldenStore(t, st, dir)
			src := metrics.Sources{Instances: a}
			if feed {
				// The states as the daemon hands them: over host-a's
				// parts that keep them.
				src.Store = st
				src.States = view.States{Host: "host-a", Faults: faults.New(st, nil), Kept: vmstate.New(st, "host-a")}
			}
			reg := prometheus.NewRegistry()
			if err := metrics.New().Register(reg, src); err != nil {
				t.Fatal(err)
			}
			for range 2 { // the second scrape reads what the first left
				if err := testutil.GatherAndCompare(reg, strings.NewReader(goldenInstances), "vmeta_host_instances"); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
