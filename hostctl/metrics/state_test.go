package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vmeta/vmeta/hostctl/metrics"
)

// goldenState is the exposition of the part-state metrics for the
// sources TestStateMetrics gives, as host-a serves them: host-a's share
// statuses at zero where it has no mapping, host-b's only where it has.
const goldenState = `# HELP vmeta_host_share_mappings Share mappings in the store by owning host and status (attaching, inactive, active, detaching, error).
# TYPE vmeta_host_share_mappings gauge
vmeta_host_share_mappings{host="host-a",status="active"} 2
vmeta_host_share_mappings{host="host-a",status="attaching"} 0
vmeta_host_share_mappings{host="host-a",status="detaching"} 0
vmeta_host_share_mappings{host="host-a",status="error"} 1
vmeta_host_share_mappings{host="host-a",status="inactive"} 0
vmeta_host_share_mappings{host="host-b",status="error"} 3
# HELP vmeta_hostctl_devices_awaiting_cleaning Burned one-time-use devices of this host released by their instance and not cleaned yet (hostctl device list --needs-cleaning).
# TYPE vmeta_hostctl_devices_awaiting_cleaning gauge
vmeta_hostctl_devices_awaiting_cleaning 3
# HELP vmeta_hostctl_devices_awaiting_cleaning_oldest_seconds Time the longest-waiting device of this host has been awaiting cleaning, since its release (0: none waits).
# TYPE vmeta_hostctl_devices_awaiting_cleaning_oldest_seconds gauge
vmeta_hostctl_devices_awaiting_cleaning_oldest_seconds 90000
# HELP vmeta_hostctl_key_rotations Subjects of this host's key classes (one per class, one per instance for disk passphrases) whose rotation is pending (begun or waiting, e.g. for an instance to stop) or whose last attempt failed, by class and state.
# TYPE vmeta_hostctl_key_rotations gauge
vmeta_hostctl_key_rotations{class="disk-passphrases",state="failed"} 0
vmeta_hostctl_key_rotations{class="disk-passphrases",state="pending"} 2
vmeta_hostctl_key_rotations{class="key-encryption-key",state="failed"} 1
vmeta_hostctl_key_rotations{class="key-encryption-key",state="pending"} 0
`

var stateNames = []string{"vmeta_host_share_mappings", "vmeta_hostctl_devices_awaiting_cleaning",
	"vmeta_hostctl_devices_awaiting_cleaning_oldest_seconds", "vmeta_hostctl_key_rotations"}

// TestStateMetrics: devices awaiting cleaning (counted, the oldest aged
// by the clock; one of unknown release time counted, not aged), share
// mappings by host and status, key rotations pending and failed, as a
// scrape reads them from their sources; a source that fails costs its
// own series only, and nothing is registered without sources.
func TestStateMetrics(t *testing.T) {
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	var failDevices bool
	src := metrics.Sources{
		Host: "host-a",
		Now:  func() time.Time { return now },
		AwaitingCleaning: func(context.Context) ([]time.Time, error) {
			if failDevices {
				return nil, errors.New("store unreachable")
			}
			return []time.Time{now.Add(-time.Hour), now.Add(-25 * time.Hour), {}}, nil
		},
		ShareMappings: func(context.Context) ([]metrics.ShareMappings, error) {
			return []metrics.ShareMappings{{Host: "host-a", Status: "active", Count: 2}, {Host: "host-a", Status: "error", Count: 1}, {Host: "host-b", Status: "error", Count: 3}}, nil
		},
		KeyRotations: func(context.Context) ([]metrics.KeyRotations, error) {
			return []metrics.KeyRotations{{Class: "key-encryption-key", Failed: 1}, {Class: "disk-passphrases", Pending: 2}}, nil
		},
	}
	reg := prometheus.NewRegistry()
	if err := metrics.New().Register(reg, src); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(goldenState), stateNames...); err != nil {
		t.Fatal(err)
	}

	// The device source fails: its two series go (the scrape reports the
	// error), the others stay.
	failDevices = true
	fams, err := reg.Gather()
	if err == nil || !strings.Contains(err.Error(), "store unreachable") {
		t.Errorf("gather with a failing source: %v, want its error", err)
	}
	got := map[string]bool{}
	for _, f := range fams {
		got[f.GetName()] = true
	}
	for _, name := range stateNames {
		if want := !strings.Contains(name, "devices"); got[name] != want {
			t.Errorf("%s served: %v, want %v", name, got[name], want)
		}
	}

	// No sources: none of these series.
	bare := prometheus.NewRegistry()
	if err := metrics.New().Register(bare, metrics.Sources{}); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(bare, stateNames...); err != nil || n != 0 {
		t.Errorf("without sources: %d series (%v)", n, err)
	}
}
