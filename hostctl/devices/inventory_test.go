package devices

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/events"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/redis"
	"github.com/vmeta/vmeta/internal/testenv"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// backend is a store the inventory runs on, with its event streams.
type backend struct {
	st      Store
	streams store.Streams
}

func openBolt(t testing.TB, dir string) backend {
	t.Helper()
	s := stores.BoltAt(t, filepath.Join(dir, "state.db"))
	return backend{st: s, streams: events.For(s, filepath.Join(dir, "events"))}
}

func openRedis(t testing.TB, url string) backend {
	t.Helper()
	s, err := redis.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return backend{st: s, streams: s}
}

// eachBackend runs fn on bolt and on a real Redis.
func eachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Run("bolt", func(t *testing.T) { fn(t, openBolt(t, t.TempDir())) })
	t.Run("redis", func(t *testing.T) { fn(t, openRedis(t, testenv.StartRedis(t))) })
}

const gpuSpec = `
devices:
  - address: "0000:3b:00.0"
    alias: gpu
    one_time_use: true
  - address: "0000:3c:00.0"
    alias: gpu
    one_time_use: true
  - vendor_id: "144d"
    alias: nvme
  - address: "0000:af:00.0"
    alias: nic
    live_migratable: true
`

func newInventory(t testing.TB, b backend, host, specText string, devs []fixtureDevice, hook *Hook) *Inventory {
	t.Helper()
	spec, err := ParseSpec([]byte(specText))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := New(b.st, Options{Host: host, Spec: spec, Events: events.New(b.streams, host, nil), Hook: hook})
	if err != nil {
		t.Fatal(err)
	}
	found, err := Discover(writeSysfs(t, devs))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Sync(t.Context(), found); err != nil {
		t.Fatal(err)
	}
	return inv
}

func show(t testing.TB, inv *Inventory, addr string) Device {
	t.Helper()
	d, err := inv.Show(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// counters prints the placement view of a device.
func counters(d Device) string {
	return fmt.Sprintf("total=%d reserved=%d used=%d consumer=%q needs_cleaning=%v traits=%v",
		d.Total, d.Reserved, d.Used, d.ConsumerName, d.NeedsCleaning, d.Traits)
}

func wantCounters(t testing.TB, inv *Inventory, addr, want string) Device {
	t.Helper()
	d := show(t, inv, addr)
	if got := counters(d); got != want {
		t.Fatalf("%s: %s\nwant %s", addr, got, want)
	}
	return d
}

func streamTypes(t testing.TB, b backend) []string {
	t.Helper()
	evs, err := events.Read(context.Background(), b.streams, Stream, "", 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		d, err := decodeDevice(e.Payload)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e.Type+" "+d.Address)
	}
	return out
}

// The whole one-time-use workflow of Nova's functional test
// (test_one_time_use_workflow): boot burns, delete leaves it reserved,
// the next boot finds nothing, cleaning brings it back.
func TestOneTimeUseWorkflow(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		inv := newInventory(t, b, "h1", gpuSpec, gpuServer, nil)
		list, _ := inv.List(ctx, Filter{})
		if len(list) != 5 {
			t.Fatalf("inventory has %d devices, want 5: %+v", len(list), list)
		}
		wantCounters(t, inv, "0000:3b:00.0", `total=1 reserved=0 used=0 consumer="" needs_cleaning=false traits=[HW_PCI_ONE_TIME_USE]`)
		wantCounters(t, inv, "0000:af:00.0", `total=1 reserved=0 used=0 consumer="" needs_cleaning=false traits=[]`)
		if d := show(t, inv, "0000:af:00.0"); !d.LiveMigratable || d.Host != "h1" || d.Alias != "nic" {
			t.Fatalf("nic record %+v", d)
		}

		vm1 := Consumer{UUID: "u-1", Name: "vm1"}
		held, claimed, err := inv.Claim(ctx, vm1, []model.PCIAlias{{Name: "gpu", Count: 2}})
		if err != nil || len(held) != 2 || len(claimed) != 2 {
			t.Fatalf("Claim = %v, %v, %v", held, claimed, err)
		}
		for _, a := range []string{"0000:3b:00.0", "0000:3c:00.0"} {
			wantCounters(t, inv, a, `total=1 reserved=1 used=1 consumer="vm1" needs_cleaning=false traits=[HW_PCI_ONE_TIME_USE]`)
		}
		// Idempotent: re-applying (or rebuilding) keeps the devices.
		again, claimed2, err := inv.Claim(ctx, vm1, []model.PCIAlias{{Name: "gpu", Count: 2}})
		if err != nil || len(claimed2) != 0 || again[0].Address != held[0].Address || again[1].Address != held[1].Address {
			t.Fatalf("second Claim = %v, %v, %v; want the same devices, nothing new", again, claimed2, err)
		}

		_, _, err = inv.Claim(ctx, Consumer{UUID: "u-2", Name: "vm2"}, []model.PCIAlias{{Name: "gpu", Count: 1}})
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, store.ErrConflict) ||
			!strings.Contains(err.Error(), "no device available for vm2: alias gpu: 0 burned awaiting cleaning, 2 in use") {
			t.Fatalf("Claim with every gpu in use = %v", err)
		}
		if _, err := inv.Clean(ctx, "0000:3b:00.0"); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "in use by instance vm1") {
			t.Fatalf("Clean of a device in use = %v", err)
		}

		rel, err := inv.Release(ctx, "u-1", nil)
		if err != nil || len(rel) != 2 {
			t.Fatalf("Release = %v, %v", rel, err)
		}
		d := wantCounters(t, inv, "0000:3b:00.0", `total=1 reserved=1 used=0 consumer="vm1" needs_cleaning=true traits=[HW_PCI_ONE_TIME_USE]`)
		if d.ReleasedAt == nil || d.BurnedAt == nil {
			t.Fatalf("released device without times: %+v", d)
		}
		_, _, err = inv.Claim(ctx, Consumer{UUID: "u-2", Name: "vm2"}, []model.PCIAlias{{Name: "gpu", Count: 1}})
		if err == nil || !strings.Contains(err.Error(), "alias gpu: 2 burned awaiting cleaning, 0 in use") {
			t.Fatalf("Claim with every gpu burned = %v", err)
		}
		nc, _ := inv.List(ctx, Filter{NeedsCleaning: true})
		if len(nc) != 2 {
			t.Fatalf("--needs-cleaning lists %d, want 2", len(nc))
		}
		otu, _ := inv.List(ctx, Filter{Trait: TraitOneTimeUse})
		if len(otu) != 2 {
			t.Fatalf("--trait lists %d, want 2", len(otu))
		}

		// A re-sync (restart) does not lower reserved.
		found, _ := Discover(writeSysfs(t, gpuServer))
		if _, err := inv.Sync(ctx, found); err != nil {
			t.Fatal(err)
		}
		wantCounters(t, inv, "0000:3b:00.0", `total=1 reserved=1 used=0 consumer="vm1" needs_cleaning=true traits=[HW_PCI_ONE_TIME_USE]`)

		if _, err := inv.Clean(ctx, "0000:3b:00.0"); err != nil {
			t.Fatal(err)
		}
		wantCounters(t, inv, "0000:3b:00.0", `total=1 reserved=0 used=0 consumer="vm1" needs_cleaning=false traits=[HW_PCI_ONE_TIME_USE]`)
		held, _, err = inv.Claim(ctx, Consumer{UUID: "u-2", Name: "vm2"}, []model.PCIAlias{{Name: "gpu", Count: 1}})
		if err != nil || held[0].Address != "0000:3b:00.0" {
			t.Fatalf("Claim after cleaning = %v, %v; want the cleaned device", held, err)
		}
		want := []string{"device.burned 0000:3b:00.0", "device.burned 0000:3c:00.0", "device.released 0000:3b:00.0",
			"device.released 0000:3c:00.0", "device.cleaned 0000:3b:00.0", "device.burned 0000:3b:00.0"}
		got := streamTypes(t, b)
		if len(got) != len(want) {
			t.Fatalf("events %v, want %v", got, want)
		}
		for i := range want { // the two of one claim may come in either order
			if strings.Fields(got[i])[0] != strings.Fields(want[i])[0] {
				t.Fatalf("events %v, want %v", got, want)
			}
		}
	})
}

// Bad input is a clear error and changes nothing.
func TestClaimBadInput(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		inv := newInventory(t, b, "h1", gpuSpec, gpuServer, nil)
		before, _ := inv.List(ctx, Filter{})
		vm := Consumer{UUID: "u-1", Name: "vm1"}
		for _, tc := range []struct {
			reqs []model.PCIAlias
			err  string
		}{
			{[]model.PCIAlias{{Name: "fpga", Count: 1}}, `pci_aliases[0].name: "fpga": unknown alias: no device_spec entry of host h1 has it`},
			{[]model.PCIAlias{{Name: "gpu", Count: 3}}, `pci_aliases[0].count: 3: more than the 2 devices of alias gpu on host h1`},
			// All or nothing: the nic is free, the nvme request is too big.
			{[]model.PCIAlias{{Name: "nic", Count: 1}, {Name: "nvme", Count: 5}}, `pci_aliases[1].count: 5: more than the 2 devices`},
		} {
			_, _, err := inv.Claim(ctx, vm, tc.reqs)
			if !errors.Is(err, model.ErrInvalidSpec) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Claim(%v) = %v, want an invalid-spec error containing %q", tc.reqs, err, tc.err)
			}
		}
		for _, addr := range []string{"3b:00.0", "0000:3B:00.0", "gpu"} {
			if _, err := inv.Clean(ctx, addr); !errors.Is(err, model.ErrInvalidSpec) || !strings.Contains(err.Error(), "is not a PCI address") {
				t.Errorf("Clean(%q) = %v", addr, err)
			}
		}
		if _, err := inv.Clean(ctx, "0000:99:00.0"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Clean of an unknown device = %v", err)
		}
		after, _ := inv.List(ctx, Filter{})
		for i := range before {
			if before[i].Generation != after[i].Generation {
				t.Errorf("%s changed: generation %d -> %d", before[i].Address, before[i].Generation, after[i].Generation)
			}
		}
	})
}

// A device marked one-time-use while allocated is healed into reserved
// at the next sync; turning one-time-use off never lowers reserved.
func TestHealOneTimeUseMarkedLate(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		plain := strings.ReplaceAll(gpuSpec, "one_time_use: true", "one_time_use: false")
		inv := newInventory(t, b, "h1", plain, gpuServer, nil)
		if _, _, err := inv.Claim(ctx, Consumer{UUID: "u-1", Name: "vm1"}, []model.PCIAlias{{Name: "gpu", Count: 2}}); err != nil {
			t.Fatal(err)
		}
		wantCounters(t, inv, "0000:3b:00.0", `total=1 reserved=0 used=1 consumer="vm1" needs_cleaning=false traits=[]`)
		// The operator marks the gpus one-time-use and restarts hostctl.
		inv = newInventory(t, b, "h1", gpuSpec, gpuServer, nil)
		wantCounters(t, inv, "0000:3b:00.0", `total=1 reserved=1 used=1 consumer="vm1" needs_cleaning=false traits=[HW_PCI_ONE_TIME_USE]`)
		if _, err := inv.Release(ctx, "u-1", nil); err != nil {
			t.Fatal(err)
		}
		// And takes it back: reserved stays (hostctl never lowers it), and
		// it still needs cleaning (the counters say so, not the trait).
		inv = newInventory(t, b, "h1", plain, gpuServer, nil)
		wantCounters(t, inv, "0000:3b:00.0", `total=1 reserved=1 used=0 consumer="vm1" needs_cleaning=true traits=[]`)
		if _, _, err := inv.Claim(ctx, Consumer{UUID: "u-2", Name: "vm2"}, []model.PCIAlias{{Name: "gpu", Count: 1}}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("claim of reserved devices = %v", err)
		}
	})
}

// A device that disappears (or leaves the spec) is kept while burned or
// used, never claimed, and dropped once it is neither.
func TestSyncDeviceGone(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		inv := newInventory(t, b, "h1", gpuSpec, gpuServer, nil)
		if _, _, err := inv.Claim(ctx, Consumer{UUID: "u-1", Name: "vm1"}, []model.PCIAlias{{Name: "gpu", Count: 1}, {Name: "nic", Count: 1}}); err != nil {
			t.Fatal(err)
		}
		if _, err := inv.Release(ctx, "u-1", nil); err != nil {
			t.Fatal(err)
		}
		inv = newInventory(t, b, "h1", gpuSpec, thisMachine, nil) // none of them found now
		list, _ := inv.List(ctx, Filter{})
		if len(list) != 1 || list[0].Present || !list[0].NeedsCleaning {
			t.Fatalf("after the devices went away: %+v; want only the burned gpu, not present", list)
		}
		if _, _, err := inv.Claim(ctx, Consumer{UUID: "u-2", Name: "vm2"}, []model.PCIAlias{{Name: "gpu", Count: 1}}); !strings.Contains(err.Error(), "more than the 0 devices of alias gpu on host h1 (1 more not present)") {
			t.Fatalf("claim of a device not present = %v", err)
		}
	})
}

// Two hosts share one Redis (and a Redis Cluster, where each host's group
// is one slot): each claims only its own devices, and --all-hosts lists
// both.
func TestTwoHostsOneRedis(t *testing.T) {
	t.Run("single", func(t *testing.T) { testTwoHosts(t, testenv.StartRedis(t)) })
	t.Run("cluster", func(t *testing.T) { testTwoHosts(t, testenv.ClusterURL(testenv.StartRedisCluster(t))) })
}

func testTwoHosts(t *testing.T, url string) {
	ctx := t.Context()
	a := newInventory(t, openRedis(t, url), "host-a", gpuSpec, gpuServer, nil)
	b := newInventory(t, openRedis(t, url), "host-b", gpuSpec, gpuServer, nil)
	if _, _, err := a.Claim(ctx, Consumer{UUID: "u-1", Name: "vm1"}, []model.PCIAlias{{Name: "gpu", Count: 2}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Claim(ctx, Consumer{UUID: "u-2", Name: "vm2"}, []model.PCIAlias{{Name: "gpu", Count: 2}}); err != nil {
		t.Fatalf("host-b's gpus are its own: %v", err)
	}
	all, err := a.List(ctx, Filter{AllHosts: true, Trait: TraitOneTimeUse})
	if err != nil || len(all) != 4 || all[0].Host != "host-a" || all[3].Host != "host-b" {
		t.Fatalf("--all-hosts = %+v, %v", all, err)
	}
}
