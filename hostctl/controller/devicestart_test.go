package controller_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/devices"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store/redis"
	"github.com/vmeta/vmeta/internal/testenv"
)

// failingMounts is a part standing for the share service whose mounts
// fail while fail is set: each start then puts the instance in ERROR, as
// a real NFS mount failure does (hostctl/shares).
type failingMounts struct{ fail bool }

var _ part.Starter = (*failingMounts)(nil)

func (f *failingMounts) Name() string { return "failing-mounts" }
func (f *failingMounts) Answers() part.Answers {
	a := part.Answers{}
	for _, op := range part.Ops() {
		a[op] = part.Answer{Do: part.Nothing}
	}
	return a
}
func (f *failingMounts) Check(context.Context, part.Op, *part.Instance) error { return nil }
func (f *failingMounts) Prepare(context.Context, part.Op, *part.Instance, *revert.Reverter, *part.Contribution) error {
	return nil
}
func (f *failingMounts) Devices(*part.Instance) ([]part.Device, error)     { return nil, nil }
func (f *failingMounts) AfterStart(context.Context, *part.Instance) error  { return nil }
func (f *failingMounts) AfterStop(context.Context, *part.Instance) error   { return nil }
func (f *failingMounts) AfterDelete(context.Context, *part.Instance) error { return nil }

// BeforeStart mounts the instance's shares: it fails while fail is set.
func (f *failingMounts) BeforeStart(_ context.Context, in *part.Instance, _ *revert.Reverter) error {
	if f.fail {
		return &part.MountError{Share: "1b4e28ba-2fa1-11d2-883f-0016d3cca427", Instance: in.Spec.UUID, Err: controller.ErrInjected}
	}
	return nil
}

// vmXML is the persistent definition of the fake hypervisor's vm1.
func vmXML(e *controller.Env) string {
	x, _, _ := e.Domain("vm1")
	return x
}

// vmRunning reports whether the fake hypervisor's vm1 runs.
func vmRunning(e *controller.Env) bool {
	_, running, _ := e.Domain("vm1")
	return running
}

// poolCounts counts the inventory's devices: free (neither used nor
// reserved), burned (reserved = total) and held by uuid.
func poolCounts(t *testing.T, inv *devices.Inventory, uuid string) (free, burned, held int) {
	t.Helper()
	list, err := inv.List(context.Background(), devices.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range list {
		switch {
		case d.Used == 0 && d.Reserved == 0:
			free++
		case d.Reserved >= d.Total:
			burned++
		}
		if d.Consumer == uuid && d.Used > 0 {
			held++
		}
	}
	return free, burned, held
}

// Issue 20 item 12: an instance keeps its devices while it exists. Starts
// that fail (libvirt refusing the domain), a share mount failure that
// puts the instance in ERROR and every hard reboot of it in ERROR that
// fails again all keep the instance's claim and its burned gpu: the
// domain's definition keeps the <hostdev>, the other gpu stays free, and
// the start that finally succeeds boots with the same gpu. The pool loses
// exactly one device, and delete releases it, burned. On bolt and on a
// real Redis (the inventory's store).
func TestFailedStartKeepsDevices(t *testing.T) {
	t.Run("bolt", func(t *testing.T) {
		e := controller.NewEnv(t)
		testFailedStartKeeps(t, e, e.WithDevices())
	})
	t.Run("redis", func(t *testing.T) {
		e := controller.NewEnv(t)
		rs, err := redis.Open(context.Background(), testenv.StartRedis(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		testFailedStartKeeps(t, e, e.WithDevices(func(devices.Store) devices.Store { return rs }))
	})
}

func testFailedStartKeeps(t *testing.T, e *controller.Env, inv *devices.Inventory) {
	ctx := context.Background()
	mounts := &failingMounts{}
	e.AddPart(mounts)
	inst := e.MustApply("name: vm1\npci_aliases: [{name: gpu}]\n")
	gpu := inst.Spec.PCIDevices[0].Address
	uuid := inst.Spec.UUID
	bus := `bus="0x` + gpu[5:7] + `"`

	check := func(when string) {
		t.Helper()
		d, err := inv.Show(ctx, gpu)
		if err != nil || d.Used != 1 || d.Reserved != 1 || d.Consumer != uuid || d.NeedsCleaning {
			t.Fatalf("%s: %s is %+v, %v; want held by vm1 and burned", when, gpu, d, err)
		}
		if free, burned, held := poolCounts(t, inv, uuid); free != 1 || burned != 1 || held != 1 {
			t.Fatalf("%s: %d free, %d burned, %d held by vm1; want 1, 1, 1", when, free, burned, held)
		}
		if x := vmXML(e); !strings.Contains(x, "<hostdev") || !strings.Contains(x, bus) {
			t.Fatalf("%s: the domain's definition lost the hostdev of %s:\n%s", when, gpu, x)
		}
	}
	check("after apply")

	const tries = 3
	for i := range tries {
		e.FailNextStarts(1)
		if _, err := e.Ctl().Start(ctx, "vm1"); !errors.Is(err, controller.ErrInjected) {
			t.Fatalf("start %d = %v, want the injected failure", i+1, err)
		}
		check(fmt.Sprintf("after failed start %d", i+1))
	}

	// A share that cannot be mounted: ERROR, and each hard reboot fails
	// again.
	mounts.fail = true
	if _, err := e.Ctl().Start(ctx, "vm1"); !errors.Is(err, part.ErrMountFailed) {
		t.Fatalf("start with the mount failing = %v", err)
	}
	if got, err := e.Ctl().Get(ctx, "vm1"); err != nil || got.State != controller.StateError {
		t.Fatalf("after the mount failure: %+v, %v; want ERROR", got, err)
	}
	check("after the mount failure")
	for i := range tries {
		if _, err := e.Ctl().Reboot(ctx, "vm1", true); !errors.Is(err, part.ErrMountFailed) {
			t.Fatalf("hard reboot %d in ERROR = %v", i+1, err)
		}
		check(fmt.Sprintf("after failed hard reboot %d in ERROR", i+1))
	}

	mounts.fail = false
	got, err := e.Ctl().Reboot(ctx, "vm1", true)
	if err != nil {
		t.Fatalf("hard reboot with the mount working: %v", err)
	}
	if got.State == controller.StateError || len(got.Spec.PCIDevices) != 1 || got.Spec.PCIDevices[0].Address != gpu || !vmRunning(e) {
		t.Fatalf("after the successful hard reboot: state %s, devices %+v, running %v; want running with %s",
			got.State, got.Spec.PCIDevices, vmRunning(e), gpu)
	}
	check("after the successful hard reboot")
	free, burned, _ := poolCounts(t, inv, uuid)
	t.Logf("after %d failed starts, a mount failure and %d failed hard reboots in ERROR: %d of 2 gpus burned, %d free", tries, tries, burned, free)

	if err := e.Ctl().Delete(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	if d, _ := inv.Show(ctx, gpu); d.Used != 0 || !d.NeedsCleaning {
		t.Fatalf("after delete: %+v; want released, needing cleaning", d)
	}
	if free, burned, _ := poolCounts(t, inv, uuid); free != 1 || burned != 1 {
		t.Fatalf("after delete: %d free, %d burned; want 1 and 1", free, burned)
	}
}

// On the real libvirtd, which refuses to start a domain whose hostdev is
// not on this machine (it has no spare PCI device): each real failed
// start keeps the device, burned and held, and its <hostdev> in the
// domain's definition; the other gpu stays free; delete releases the one
// burned.
func TestLibvirtFailedStartKeepsDevice(t *testing.T) {
	e, uri := controller.RealEnv(t)
	inv := e.WithDevices()
	ctx := context.Background()
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	inst := e.MustApply("name: " + name + "\ndisks: [{name: vda, size: 8M}]\npci_aliases: [{name: gpu, tag: ml}]\n")
	gpu, uuid := inst.Spec.PCIDevices[0].Address, inst.Spec.UUID

	for i := range 3 {
		_, err := e.Ctl().Start(ctx, name)
		if err == nil {
			t.Fatal("a domain with a hostdev of a missing device started")
		}
		if i == 0 {
			t.Logf("start: %v", err)
		}
		if d, _ := inv.Show(ctx, gpu); d.Used != 1 || d.Reserved != 1 || d.Consumer != uuid {
			t.Fatalf("after failed start %d: %+v; want held and burned", i+1, d)
		}
		if free, burned, held := poolCounts(t, inv, uuid); free != 1 || burned != 1 || held != 1 {
			t.Fatalf("after failed start %d: %d free, %d burned, %d held; want 1, 1, 1", i+1, free, burned, held)
		}
		if x := controller.Virsh(t, uri, "dumpxml", "--inactive", name); !strings.Contains(x, "bus='0x"+gpu[5:7]+"'") {
			t.Fatalf("after failed start %d the definition lost the hostdev of %s:\n%s", i+1, gpu, x)
		}
		got, err := e.Ctl().Get(ctx, name)
		if err != nil || got.Spec.PCIDevices[0].Address != gpu {
			t.Fatalf("after failed start %d: %+v, %v", i+1, got, err)
		}
	}
	if err := e.Ctl().Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	if nc, _ := inv.List(ctx, devices.Filter{NeedsCleaning: true}); len(nc) != 1 || nc[0].Address != gpu {
		t.Fatalf("after delete, needing cleaning: %+v; want only %s", nc, gpu)
	}
}

// releaseAsBefore puts an instance in the state a hostctl before issue
// 20 left it in after a failed start: its devices released and their
// <hostdev>s out of the domain's definition.
func releaseAsBefore(t *testing.T, e *controller.Env, inv *devices.Inventory, name, uuid string) {
	t.Helper()
	ctx := context.Background()
	held, err := inv.HeldBy(ctx, uuid)
	if err != nil {
		t.Fatal(err)
	}
	if err := inv.ReleaseFor(ctx, uuid, nil); err != nil {
		t.Fatal(err)
	}
	for _, a := range held {
		x, err := virt.HostdevXML(a, "")
		if err == nil {
			err = e.DetachFromDefinition(ctx, name, x)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// An instance left without its devices by an earlier hostctl (which
// released them when a start failed) is healed by the next start before
// it boots: a burned gpu is replaced by the other one (the domain
// redefined with it), and the start is refused with nothing booted when
// none is free.
func TestStartHealsReleasedDevices(t *testing.T) {
	e := controller.NewEnv(t)
	inv := e.WithDevices()
	ctx := context.Background()
	inst := e.MustApply("name: vm1\npci_aliases: [{name: gpu}]\n")
	first, uuid := inst.Spec.PCIDevices[0].Address, inst.Spec.UUID
	releaseAsBefore(t, e, inv, "vm1", uuid)

	inst, err := e.Ctl().Start(ctx, "vm1")
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if len(inst.Spec.PCIDevices) != 1 || inst.Spec.PCIDevices[0].Address == first {
		t.Fatalf("after the start the spec has %+v; want the other gpu", inst.Spec.PCIDevices)
	}
	second := inst.Spec.PCIDevices[0].Address
	xml := vmXML(e)
	if !vmRunning(e) || !strings.Contains(xml, `bus="0x`+second[5:7]+`"`) || strings.Contains(xml, "0x"+first[5:7]) {
		t.Fatalf("domain (running %v) does not name only %s:\n%s", vmRunning(e), second, xml)
	}
	if _, err := e.Ctl().Stop(ctx, "vm1", 1); err != nil {
		t.Fatal(err)
	}
	releaseAsBefore(t, e, inv, "vm1", uuid)
	if _, err := e.Ctl().Start(ctx, "vm1"); !errors.Is(err, devices.ErrUnavailable) || !strings.Contains(err.Error(), "2 burned awaiting cleaning") {
		t.Fatalf("start with every device burned = %v", err)
	}
	if vmRunning(e) {
		t.Fatal("the domain runs without a device")
	}
}

// A device that is not one-time-use, released by an earlier hostctl, is
// claimed again unchanged, so the spec (and the domain's definition)
// would be unchanged — the start puts its hostdev back into the
// definition before it boots.
func TestStartHealsSameDeviceBack(t *testing.T) {
	e := controller.NewEnv(t)
	inv := nicInventory(t, e)
	ctx := context.Background()
	inst := e.MustApply("name: vm1\npci_aliases: [{name: nic, tag: fast}]\n")
	releaseAsBefore(t, e, inv, "vm1", inst.Spec.UUID)
	if x := vmXML(e); strings.Contains(x, "<hostdev") {
		t.Fatalf("the definition still names the released device:\n%s", x)
	}
	if _, err := e.Ctl().Start(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	x := vmXML(e)
	if !vmRunning(e) || !strings.Contains(x, "<hostdev") || !strings.Contains(x, `bus="0x3b"`) {
		t.Fatalf("running %v with definition:\n%s", vmRunning(e), x)
	}
	if d, _ := inv.Show(ctx, "0000:3b:00.0"); d.Used != 1 || d.Consumer != inst.Spec.UUID {
		t.Fatalf("after the start: %+v", d)
	}
}

// nicInventory gives e's controller an inventory of one plain nic.
func nicInventory(t *testing.T, e *controller.Env) *devices.Inventory {
	t.Helper()
	spec, err := devices.ParseSpec([]byte(`[{"address":"0000:3b:00.0","alias":"nic"}]`))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := devices.New(e.DeviceStore(), devices.Options{Host: "h1", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Sync(t.Context(), []devices.Found{{Address: "0000:3b:00.0", VendorID: "8086", ProductID: "1572", Class: "020000"}}); err != nil {
		t.Fatal(err)
	}
	e.UseInventory(inv)
	return inv
}

// On the real libvirtd: a plain device released by an earlier hostctl is
// claimed again unchanged by the next start, which puts its hostdev back
// into the definition at the guest address the published metadata names
// (checked before the boot, which fails here: no passthrough on this
// machine).
func TestLibvirtStartHealsSameDeviceBack(t *testing.T) {
	e, uri := controller.RealEnv(t)
	inv := nicInventory(t, e)
	ctx := context.Background()
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	inst := e.MustApply("name: " + name + "\ndisks: [{name: vda, size: 8M}]\npci_aliases: [{name: nic, tag: fast}]\n")
	guest := inst.Spec.PCIDevices[0].GuestAddress
	if guest == "" {
		t.Fatal("no guest address read back")
	}
	releaseAsBefore(t, e, inv, name, inst.Spec.UUID)
	if x := controller.Virsh(t, uri, "dumpxml", "--inactive", name); strings.Contains(x, "<hostdev") {
		t.Fatalf("the definition still names the released device:\n%s", x)
	}
	// What Start does before it boots.
	if err := e.PreStart(ctx, name); err != nil {
		t.Fatal(err)
	}
	x := controller.Virsh(t, uri, "dumpxml", "--inactive", name)
	want := fmt.Sprintf(`(?s)<source>\s*<address domain='0x0000' bus='0x3b' slot='0x00' function='0x0'/>\s*</source>\s*<address type='pci' domain='0x%s' bus='0x%s' slot='0x%s' function='0x%s'/>`,
		guest[0:4], guest[5:7], guest[8:10], guest[11:12])
	if !regexp.MustCompile(want).MatchString(x) {
		t.Fatalf("the hostdev is not back at %s:\n%s", guest, x)
	}
	if d, _ := inv.Show(ctx, "0000:3b:00.0"); d.Used != 1 {
		t.Fatalf("not claimed again: %+v", d)
	}
	if err := e.Ctl().Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
}

// Issue 20 item 13: one_time_use on a direct pci_devices entry burns the
// device like an alias claim. The instance holds it (with its alias
// device) through re-applies and failed starts; no other instance gets it
// while held or burned; delete releases it needing cleaning. A host
// without an inventory refuses the field, saying why.
func TestDirectOneTimeUseDevice(t *testing.T) {
	e := controller.NewEnv(t)
	inv := e.WithDevices()
	ctx := context.Background()
	const direct = "0000:d8:00.0"
	spec := "name: vm1\npci_aliases: [{name: gpu}]\npci_devices: [{address: \"" + direct + "\", one_time_use: true}]\n"
	inst := e.MustApply(spec)
	uuid := inst.Spec.UUID
	want := func(when, counters string) devices.Device {
		t.Helper()
		d, err := inv.Show(ctx, direct)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if got := fmt.Sprintf("reserved=%d used=%d consumer=%s needs_cleaning=%v", d.Reserved, d.Used, d.Consumer, d.NeedsCleaning); got != counters {
			t.Fatalf("%s: %s, want %s", when, got, counters)
		}
		return d
	}
	want("after apply", "reserved=1 used=1 consumer="+uuid+" needs_cleaning=false")
	if n := len(inst.Spec.PCIDevices); n != 2 {
		t.Fatalf("pci_devices after apply: %+v", inst.Spec.PCIDevices)
	}
	e.MustApply(spec)
	want("after a re-apply", "reserved=1 used=1 consumer="+uuid+" needs_cleaning=false")
	e.FailNextStarts(1)
	if _, err := e.Ctl().Start(ctx, "vm1"); !errors.Is(err, controller.ErrInjected) {
		t.Fatalf("start = %v", err)
	}
	want("after a failed start", "reserved=1 used=1 consumer="+uuid+" needs_cleaning=false")
	if _, err := e.Ctl().Start(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	want("after the start", "reserved=1 used=1 consumer="+uuid+" needs_cleaning=false")

	vm2 := "name: vm2\npci_devices: [{address: \"" + direct + "\"}]\n"
	if _, err := e.Apply(vm2); !errors.Is(err, devices.ErrUnavailable) || !strings.Contains(err.Error(), "in use by instance vm1") {
		t.Fatalf("vm2 asking for the held device = %v", err)
	}
	if err := e.Ctl().Delete(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	want("after delete", "reserved=1 used=0 consumer= needs_cleaning=true")
	if _, err := e.Apply(vm2); !errors.Is(err, devices.ErrUnavailable) || !strings.Contains(err.Error(), "burned awaiting cleaning") {
		t.Fatalf("vm2 asking for the burned device = %v", err)
	}
	if _, err := inv.Clean(ctx, direct); err != nil {
		t.Fatal(err)
	}
	e.MustApply(vm2)

	bare := controller.NewEnv(t)
	_, err := bare.Apply("name: vm3\npci_devices: [{address: \"" + direct + "\", one_time_use: true}]\n")
	if !errors.Is(err, model.ErrInvalidSpec) || !strings.Contains(err.Error(), `pci_devices[0].one_time_use: true: this host has no device inventory (hostctl serve --device-spec)`) {
		t.Fatalf("one_time_use without an inventory = %v", err)
	}
	if bare.DomainCount() != 0 {
		t.Fatal("the refused apply defined a domain")
	}
}
