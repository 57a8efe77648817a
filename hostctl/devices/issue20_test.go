package devices

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/events"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// streamEvents returns the devices stream's events with their payloads.
func streamEvents(t testing.TB, b backend) []struct {
	Type string
	Dev  Device
} {
	t.Helper()
	evs, err := events.Read(context.Background(), b.streams, Stream, "", 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]struct {
		Type string
		Dev  Device
	}, len(evs))
	for i, e := range evs {
		out[i].Type = e.Type
		d, err := decodeDevice(e.Payload) // an event carries the stored format
		if err != nil {
			t.Fatal(err)
		}
		out[i].Dev = d
	}
	return out
}

// Issue 20 item 14: "needs cleaning" is the counters alone (total =
// reserved, used = 0). A gpu burned while one-time-use, then un-marked by
// the operator while the instance still holds it, and released: it is
// listed by --needs-cleaning (though it no longer has the trait), its
// device.released event says needs_cleaning: true (what the sample
// listener acts on), and the cleanup hook runs for it.
func TestNeedsCleaningByCounters(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		inv := newInventory(t, b, "h1", gpuSpec, gpuServer, nil)
		held, _, err := inv.Claim(ctx, Consumer{UUID: "u-1", Name: "vm1"}, []model.PCIAlias{{Name: "gpu", Count: 1}})
		if err != nil {
			t.Fatal(err)
		}
		addr := held[0].Address
		// The operator un-marks the gpus (a restart with the new spec).
		plain := strings.ReplaceAll(gpuSpec, "one_time_use: true", "one_time_use: false")
		hook, err := NewHook(`cat >/dev/null`, 0)
		if err != nil {
			t.Fatal(err)
		}
		inv = newInventory(t, b, "h1", plain, gpuServer, hook)
		wantCounters(t, inv, addr, `total=1 reserved=1 used=1 consumer="vm1" needs_cleaning=false traits=[]`)
		if _, err := inv.Release(ctx, "u-1", nil); err != nil {
			t.Fatal(err)
		}
		hook.Wait()
		d := wantCounters(t, inv, addr, `total=1 reserved=1 used=0 consumer="vm1" needs_cleaning=true traits=[]`)
		if d.LastCleanupHook == nil || d.LastCleanupHook.Outcome != HookOK {
			t.Errorf("cleanup hook of the released device: %+v", d.LastCleanupHook)
		}
		nc, err := inv.List(ctx, Filter{NeedsCleaning: true})
		if err != nil || len(nc) != 1 || nc[0].Address != addr {
			t.Fatalf("--needs-cleaning = %+v, %v; want %s", nc, err, addr)
		}
		var released []Device
		for _, e := range streamEvents(t, b) {
			if e.Type == EventReleased {
				released = append(released, e.Dev)
			}
		}
		if len(released) != 1 || released[0].Address != addr || !released[0].NeedsCleaning {
			t.Fatalf("device.released events %+v; want one for %s with needs_cleaning true", released, addr)
		}
		// Still out of the pool until cleaned; the clean brings it back.
		if _, _, err := inv.Claim(ctx, Consumer{UUID: "u-2", Name: "vm2"}, []model.PCIAlias{{Name: "gpu", Count: 2}}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("claim of both gpus with one burned = %v", err)
		}
		if _, err := inv.Clean(ctx, addr); err != nil {
			t.Fatal(err)
		}
		if nc, _ := inv.List(ctx, Filter{NeedsCleaning: true}); len(nc) != 0 {
			t.Fatalf("--needs-cleaning after clean = %+v", nc)
		}
	})
}

// Issue 20 item 15: a trait vmeta never sets (the specification's
// tentative HW_ONE_TIME_USE, a wrong case) is refused as unknown, naming
// the traits vmeta sets, instead of silently listing nothing.
func TestListUnknownTrait(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		inv := newInventory(t, b, "h1", gpuSpec, gpuServer, nil)
		for _, tr := range []string{"HW_ONE_TIME_USE", "hw_pci_one_time_use", "CUSTOM_GPU"} {
			for _, all := range []bool{false, true} {
				list, err := inv.List(ctx, Filter{Trait: tr, AllHosts: all})
				if !errors.Is(err, model.ErrInvalidSpec) || !strings.Contains(err.Error(), `invalid device list request: trait: "`+tr+`": unknown trait: vmeta sets only HW_PCI_ONE_TIME_USE`) {
					t.Errorf("List(trait %s, all hosts %v) = %v, %v; want an unknown-trait error", tr, all, list, err)
				}
			}
		}
		list, err := inv.List(ctx, Filter{Trait: TraitOneTimeUse})
		if err != nil || len(list) != 2 {
			t.Fatalf("List(trait %s) = %+v, %v; want the 2 gpus", TraitOneTimeUse, list, err)
		}
	})
}

// Issue 20 item 13: a direct pci_devices entry (an address outside the
// device spec) marked one_time_use is burned like an alias claim: a
// record is created burned and held in one write (device.burned), it
// stays held when re-claimed even once un-marked, no other instance gets
// it (whether it asks one-time-use or not) while held or burned, its
// release leaves it needing cleaning (device.released), and once cleaned
// it is usable again and the next sync drops the record. A direct entry
// naming a device of the spec is refused.
func TestDirectOneTimeUse(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		inv := newInventory(t, b, "h1", gpuSpec, gpuServer, nil)
		const addr = "0000:d8:00.0"
		vm1, vm2 := Consumer{UUID: "u-1", Name: "vm1"}, Consumer{UUID: "u-2", Name: "vm2"}
		otu := []model.PCIDevice{{Address: addr, OneTimeUse: true}}
		plain := []model.PCIDevice{{Address: addr}}

		// Not one-time-use and unknown: nothing is recorded.
		if held, claimed, err := inv.ClaimDevices(ctx, vm2, nil, plain); err != nil || len(held)+len(claimed) != 0 {
			t.Fatalf("direct plain entry = %v, %v, %v; want nothing", held, claimed, err)
		}
		if _, err := inv.Show(ctx, addr); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a plain direct entry made a record: %v", err)
		}

		held, claimed, err := inv.ClaimDevices(ctx, vm1, []model.PCIAlias{{Name: "gpu", Count: 1}}, otu)
		if err != nil || len(held) != 2 || len(claimed) != 2 {
			t.Fatalf("ClaimDevices = %+v, %v, %v", held, claimed, err)
		}
		d := wantCounters(t, inv, addr, `total=1 reserved=1 used=1 consumer="vm1" needs_cleaning=false traits=[HW_PCI_ONE_TIME_USE]`)
		if d.Alias != "" || d.Present || !d.OneTimeUse || d.BurnedAt == nil {
			t.Fatalf("direct record %+v", d)
		}
		if _, ok, _ := inv.Managed(ctx, addr); ok {
			t.Fatal("a direct record counts as a device of the spec")
		}
		// Idempotent, and un-marking keeps it held (it is burned anyway).
		if held, claimed, err := inv.ClaimDevices(ctx, vm1, nil, plain); err != nil || len(claimed) != 0 || len(held) != 1 || held[0].Address != addr {
			t.Fatalf("re-claim un-marked = %+v, %v, %v", held, claimed, err)
		}
		// Nobody else gets it while held.
		for _, ds := range [][]model.PCIDevice{otu, plain} {
			_, _, err := inv.ClaimDevices(ctx, vm2, nil, ds)
			if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "pci_devices[0] "+addr+": one-time-use, in use by instance vm1") {
				t.Fatalf("direct claim of a held device = %v", err)
			}
		}
		if _, err := inv.Release(ctx, vm1.UUID, nil); err != nil {
			t.Fatal(err)
		}
		wantCounters(t, inv, addr, `total=1 reserved=1 used=0 consumer="vm1" needs_cleaning=true traits=[HW_PCI_ONE_TIME_USE]`)
		// A sync that finds it in sysfs gives its record the device's ids
		// (the cleanup workflow wipes by class); it stays burned.
		found, _ := Discover(writeSysfs(t, append(gpuServer[:len(gpuServer):len(gpuServer)],
			fixtureDevice{addr: addr, vendor: "0x8086", device: "0x0b60", class: "0x010802"})))
		if _, err := inv.Sync(ctx, found); err != nil {
			t.Fatal(err)
		}
		if d := wantCounters(t, inv, addr, `total=1 reserved=1 used=0 consumer="vm1" needs_cleaning=true traits=[HW_PCI_ONE_TIME_USE]`); d.VendorID != "8086" || d.Class != "010802" || d.Present || d.Alias != "" {
			t.Fatalf("direct record after a sync that found it: %+v", d)
		}
		if nc, _ := inv.List(ctx, Filter{NeedsCleaning: true}); len(nc) != 2 {
			t.Fatalf("--needs-cleaning = %+v; want the gpu and %s", nc, addr)
		}
		for _, ds := range [][]model.PCIDevice{otu, plain} {
			_, _, err := inv.ClaimDevices(ctx, vm2, nil, ds)
			if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "pci_devices[0] "+addr+": burned awaiting cleaning (used by instance vm1; hostctl device clean "+addr+")") {
				t.Fatalf("direct claim of a burned device = %v", err)
			}
		}
		var types_ []string
		for _, e := range streamEvents(t, b) {
			if e.Dev.Address == addr {
				types_ = append(types_, e.Type)
				if e.Type == EventReleased && !e.Dev.NeedsCleaning {
					t.Errorf("device.released of %s says needs_cleaning false", addr)
				}
			}
		}
		if strings.Join(types_, ",") != "device.burned,device.released" {
			t.Fatalf("events of %s: %v", addr, types_)
		}

		if _, err := inv.Clean(ctx, addr); err != nil {
			t.Fatal(err)
		}
		if held, _, err := inv.ClaimDevices(ctx, vm2, nil, plain); err != nil || len(held) != 0 {
			t.Fatalf("a cleaned device used plainly = %+v, %v", held, err)
		}
		// The next sync drops the cleaned record (neither used nor reserved).
		found, _ = Discover(writeSysfs(t, gpuServer))
		if _, err := inv.Sync(ctx, found); err != nil {
			t.Fatal(err)
		}
		if _, err := inv.Show(ctx, addr); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the cleaned direct record after a sync: %v", err)
		}

		// A direct entry naming a device of the spec.
		_, _, err = inv.ClaimDevices(ctx, vm2, nil, []model.PCIDevice{{Address: "0000:5e:00.0", OneTimeUse: true}})
		if !errors.Is(err, model.ErrInvalidSpec) || !strings.Contains(err.Error(), `pci_devices[0].address: "0000:5e:00.0": is a device of host h1's inventory (alias nvme): request it through pci_aliases`) {
			t.Fatalf("direct entry of a spec device = %v", err)
		}
	})
}
