package controller

import (
	"context"
	"errors"
	"fmt"
	"regexp"
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
	if x := e.hv.domains["vm1"].xml; strings.Contains(x, "<hostdev") {
		t.Fatalf("the domain definition still names the released device:\n%s", x)
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
// releases the device, burned, and takes its hostdev out of the domain's
// definition; the next start claims the other gpu and
// redefines the domain with it before it boots — and fails too (and its
// hostdev goes too); with both burned the third start is refused
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
	if x := virshOut(t, uri, "dumpxml", "--inactive", name); strings.Contains(x, "<hostdev") {
		t.Fatalf("the domain definition still names the released device:\n%s", x)
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
	// It failed too, so its hostdev is out of the definition again.
	if x := virshOut(t, uri, "dumpxml", "--inactive", name); strings.Contains(x, "<hostdev") {
		t.Fatalf("the domain definition still names a released device:\n%s", x)
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

// A device that is not one-time-use is free again after a failed start;
// the next start claims the same one, so the spec (and the domain's
// definition) would be unchanged — the start puts its hostdev back into
// the definition before it boots.
func TestFailedStartSameDeviceBack(t *testing.T) {
	e := newEnv(t)
	ds := e.st.Store.(devices.Store)
	spec, err := devices.ParseSpec([]byte(`[{"address":"0000:3b:00.0","alias":"nic"}]`))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := devices.New(ds, devices.Options{Host: "h1", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Sync(t.Context(), []devices.Found{{Address: "0000:3b:00.0", VendorID: "8086", ProductID: "1572", Class: "020000"}}); err != nil {
		t.Fatal(err)
	}
	e.c.devices = inv
	ctx := context.Background()
	e.mustApply("name: vm1\npci_aliases: [{name: nic, tag: fast}]\n")
	e.hv.failStarts = 1
	if _, err := e.c.Start(ctx, "vm1"); !errors.Is(err, errInjected) {
		t.Fatalf("start = %v", err)
	}
	if d, _ := inv.Show(ctx, "0000:3b:00.0"); d.Used != 0 || d.Reserved != 0 || d.NeedsCleaning {
		t.Fatalf("after the failed start: %+v; want free", d)
	}
	if x := e.hv.domains["vm1"].xml; strings.Contains(x, "<hostdev") {
		t.Fatalf("the definition still names the released device:\n%s", x)
	}
	inst, err := e.c.Start(ctx, "vm1")
	if err != nil {
		t.Fatal(err)
	}
	x := e.hv.domains["vm1"].xml
	if !e.hv.domains["vm1"].running || !strings.Contains(x, "<hostdev") || !strings.Contains(x, `bus="0x3b"`) {
		t.Fatalf("running %v with definition:\n%s", e.hv.domains["vm1"].running, x)
	}
	if d, _ := inv.Show(ctx, "0000:3b:00.0"); d.Used != 1 || d.Consumer != inst.Spec.UUID {
		t.Fatalf("after the second start: %+v", d)
	}
}

// On the real libvirtd: a device that is not one-time-use, released by a
// real failed start, is claimed again unchanged by the next start, which
// puts its hostdev back into the definition at the guest address the
// published metadata names (checked before the boot, which fails here
// again: no passthrough on this machine).
func TestLibvirtSameDeviceBack(t *testing.T) {
	e, uri := realEnv(t)
	ds := e.st.Store.(devices.Store)
	spec, err := devices.ParseSpec([]byte(`[{"address":"0000:3b:00.0","alias":"nic"}]`))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := devices.New(ds, devices.Options{Host: "h1", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Sync(t.Context(), []devices.Found{{Address: "0000:3b:00.0", VendorID: "8086", ProductID: "1572", Class: "020000"}}); err != nil {
		t.Fatal(err)
	}
	e.c.devices = inv
	ctx := context.Background()
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	inst := e.mustApply("name: " + name + "\ndisks: [{name: vda, size: 8M}]\npci_aliases: [{name: nic, tag: fast}]\n")
	guest := inst.Spec.PCIDevices[0].GuestAddress
	if guest == "" {
		t.Fatal("no guest address read back")
	}
	if _, err := e.c.Start(ctx, name); err == nil {
		t.Fatal("started without passthrough support")
	}
	if x := virshOut(t, uri, "dumpxml", "--inactive", name); strings.Contains(x, "<hostdev") {
		t.Fatalf("the definition still names the released device:\n%s", x)
	}
	// What Start does before it boots.
	if err := e.c.reclaimForStart(ctx, name); err != nil {
		t.Fatal(err)
	}
	x := virshOut(t, uri, "dumpxml", "--inactive", name)
	want := fmt.Sprintf(`(?s)<source>\s*<address domain='0x0000' bus='0x3b' slot='0x00' function='0x0'/>\s*</source>\s*<address type='pci' domain='0x%s' bus='0x%s' slot='0x%s' function='0x%s'/>`,
		guest[0:4], guest[5:7], guest[8:10], guest[11:12])
	if !regexp.MustCompile(want).MatchString(x) {
		t.Fatalf("the hostdev is not back at %s:\n%s", guest, x)
	}
	if d, _ := inv.Show(ctx, "0000:3b:00.0"); d.Used != 1 {
		t.Fatalf("not claimed again: %+v", d)
	}
	if err := e.c.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
}
