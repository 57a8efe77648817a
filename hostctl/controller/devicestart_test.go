package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/devices"
	"github.com/vmeta/vmeta/internal/store/redis"
	"github.com/vmeta/vmeta/internal/testenv"
)

// A start that fails releases the instance's device (used 0, reserved
// kept: it needs cleaning); the next start claims another one, redefines
// the domain with it and boots; with no free device the start is refused
// and nothing boots; after the operator cleans one, start succeeds. On
// bolt and on a real Redis (the inventory's store).
func TestFailedStartReleasesDevices(t *testing.T) {
	t.Run("bolt", func(t *testing.T) {
		e := newEnv(t)
		testFailedStartReleases(t, e, withDevices(t, e))
	})
	t.Run("redis", func(t *testing.T) {
		e := newEnv(t)
		rs, err := redis.Open(context.Background(), testenv.StartRedis(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		testFailedStartReleases(t, e, withDevices(t, e, func(devices.Store) devices.Store { return rs }))
	})
}

func testFailedStartReleases(t *testing.T, e *env, inv *devices.Inventory) {
	ctx := context.Background()
	inst := e.mustApply("name: vm1\npci_aliases: [{name: gpu}]\n")
	first := inst.Spec.PCIDevices[0].Address
	uuid := inst.Spec.UUID
	if d, _ := inv.Show(ctx, first); d.Used != 1 || d.Reserved != 1 {
		t.Fatalf("after apply: %+v", d)
	}

	// The start fails: the device is released, burned.
	e.hv.failStarts = 1
	if _, err := e.c.Start(ctx, "vm1"); !errors.Is(err, errInjected) {
		t.Fatalf("start = %v, want the injected failure", err)
	}
	d, _ := inv.Show(ctx, first)
	if d.Used != 0 || d.Reserved != 1 || !d.NeedsCleaning {
		t.Fatalf("after the failed start: %+v; want released and burned", d)
	}
	if held, _ := inv.HeldBy(ctx, uuid); len(held) != 0 {
		t.Fatalf("the instance still holds %v", held)
	}

	// The next start claims the other gpu, redefines, boots.
	inst, err := e.c.Start(ctx, "vm1")
	if err != nil {
		t.Fatalf("second start: %v", err)
	}
	if len(inst.Spec.PCIDevices) != 1 || inst.Spec.PCIDevices[0].Address == first {
		t.Fatalf("after the second start the spec has %+v; want the other gpu", inst.Spec.PCIDevices)
	}
	second := inst.Spec.PCIDevices[0].Address
	xml := e.hv.domains["vm1"].xml
	if !e.hv.domains["vm1"].running || !strings.Contains(xml, "bus='0x"+second[5:7]+"'") && !strings.Contains(xml, `bus="0x`+second[5:7]+`"`) || strings.Contains(xml, "0x"+first[5:7]) {
		t.Fatalf("domain after the second start (running %v) does not name only %s:\n%s", e.hv.domains["vm1"].running, second, xml)
	}
	if d, _ := inv.Show(ctx, second); d.Used != 1 || d.Reserved != 1 || d.Consumer != uuid {
		t.Fatalf("second gpu: %+v", d)
	}

	// Stopped, and the start fails again: both are burned, none is free,
	// so the next start is refused before anything boots.
	// The fake guest ignores ACPI: a short grace, then power off.
	if _, err := e.c.Stop(ctx, "vm1", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	e.hv.failStarts = 1
	if _, err := e.c.Start(ctx, "vm1"); !errors.Is(err, errInjected) {
		t.Fatalf("third start = %v", err)
	}
	_, err = e.c.Start(ctx, "vm1")
	if !errors.Is(err, devices.ErrUnavailable) || !strings.Contains(err.Error(), "2 burned awaiting cleaning") {
		t.Fatalf("start with every device burned = %v", err)
	}
	if e.hv.domains["vm1"].running {
		t.Fatal("the domain runs without a device")
	}
	nc, _ := inv.List(ctx, devices.Filter{NeedsCleaning: true})
	if len(nc) != 2 {
		t.Fatalf("%d need cleaning, want 2: %+v", len(nc), nc)
	}

	// The operator cleans the first: start takes it.
	if _, err := inv.Clean(ctx, first); err != nil {
		t.Fatal(err)
	}
	inst, err = e.c.Start(ctx, "vm1")
	if err != nil {
		t.Fatalf("start after cleaning: %v", err)
	}
	if inst.Spec.PCIDevices[0].Address != first || !e.hv.domains["vm1"].running {
		t.Fatalf("after cleaning: %+v", inst.Spec.PCIDevices)
	}
	if d, _ := inv.Show(ctx, second); d.Used != 0 || !d.NeedsCleaning {
		t.Fatalf("the second gpu after its failed start: %+v", d)
	}
}

// The real libvirtd refuses to start a domain whose hostdev is not on
// this machine (it has no spare PCI device): a real failed start. It
// releases the device, burned; the next start claims the other gpu and
// redefines the domain with it (read back from libvirt's XML) before it
// boots — and fails too; with both burned the third start is refused
// before libvirt is asked.
func TestLibvirtFailedStartReleases(t *testing.T) {
	e, uri := realEnv(t)
	inv := withDevices(t, e)
	ctx := context.Background()
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	inst := e.mustApply("name: " + name + "\ndisks: [{name: vda, size: 8M}]\npci_aliases: [{name: gpu, tag: ml}]\n")
	first := inst.Spec.PCIDevices[0].Address

	_, err := e.c.Start(ctx, name)
	if err == nil {
		t.Fatal("a domain with a hostdev of a missing device started")
	}
	t.Logf("first start: %v", err)
	if d, _ := inv.Show(ctx, first); d.Used != 0 || !d.NeedsCleaning {
		t.Fatalf("after the failed start: %+v", d)
	}

	_, err = e.c.Start(ctx, name)
	if err == nil {
		t.Fatal("the second start succeeded")
	}
	got, gerr := e.c.Get(ctx, name)
	if gerr != nil {
		t.Fatal(gerr)
	}
	second := got.Spec.PCIDevices[0].Address
	if second == first {
		t.Fatalf("the second start reused the burned %s", first)
	}
	xml := virshOut(t, uri, "dumpxml", "--inactive", name)
	if !strings.Contains(xml, "bus='0x"+second[5:7]+"'") || strings.Contains(xml, "bus='0x"+first[5:7]+"'") {
		t.Fatalf("the domain was not redefined with %s instead of %s:\n%s", second, first, xml)
	}
	if d, _ := inv.Show(ctx, second); d.Used != 0 || !d.NeedsCleaning {
		t.Fatalf("the second gpu after its failed start: %+v", d)
	}

	if _, err := e.c.Start(ctx, name); !errors.Is(err, devices.ErrUnavailable) {
		t.Fatalf("third start = %v, want no device available", err)
	}
	if out := virshOut(t, uri, "domstate", name); !strings.Contains(out, "shut off") {
		t.Fatalf("domain state %q", out)
	}
	if err := e.c.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
}
