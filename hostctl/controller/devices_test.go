package controller_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/devices"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
)

// lostReply commits group writes but, while lose is set, reports them
// failed: a claim whose reply the connection lost.
type lostReply struct {
	devices.Store
	lose bool
}

func (l *lostReply) CommitGroup(ctx context.Context, group string, ops []store.GroupOp) ([]store.Record, error) {
	recs, err := l.Store.CommitGroup(ctx, group, ops)
	if err == nil && l.lose {
		return nil, controller.ErrInjected
	}
	return recs, err
}

// The store takes a new instance's claim but the reply is lost: the apply
// fails clearly, nothing else is done (no domain, no record), and the
// claimed device is released at once — burned, needing cleaning, never
// free and never held by an instance that does not exist.
func TestApplyClaimReplyLost(t *testing.T) {
	e := controller.NewEnv(t)
	lr := &lostReply{}
	inv := e.WithDevices(func(s devices.Store) devices.Store { lr.Store = s; return lr })
	lr.lose = true
	ctx := context.Background()
	_, err := e.Apply("name: vm1\npci_aliases: [{name: gpu}]\n")
	if !errors.Is(err, controller.ErrInjected) || !strings.Contains(err.Error(), "apply vm1: claim devices for vm1") {
		t.Fatalf("apply = %v", err)
	}
	lr.lose = false
	if _, err := e.Record(ctx, "vm1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the failed apply left a record: %v", err)
	}
	if e.DomainCount() != 0 {
		t.Fatalf("the failed apply defined %d domains", e.DomainCount())
	}
	list, _ := inv.List(ctx, devices.Filter{})
	used, nc := 0, 0
	for _, d := range list {
		used += d.Used
		if d.NeedsCleaning {
			nc++
		}
	}
	if used != 0 || nc != 1 {
		t.Fatalf("after the lost reply: %+v; want nothing held and one device needing cleaning", list)
	}
}

// The claimed device goes into the domain as a managed <hostdev>, checked
// in the XML the real libvirtd defined (define only: this machine has no
// spare PCI device to start a guest with). A publish that fails after the
// define releases the device it claimed, burned; deleting the instance
// releases its device, burned.
func TestLibvirtHostdevDefined(t *testing.T) {
	e, uri := controller.RealEnv(t)
	inv := e.WithDevices()
	ctx := context.Background()
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)

	inst := e.MustApply("name: " + name + "\ndisks: [{name: vda, size: 8M}]\npci_aliases: [{name: gpu}]\n")
	if len(inst.Spec.PCIDevices) != 1 || inst.Spec.PCIDevices[0].Alias != "gpu" {
		t.Fatalf("applied spec pci_devices %+v", inst.Spec.PCIDevices)
	}
	addr := inst.Spec.PCIDevices[0].Address
	xml := controller.Virsh(t, uri, "dumpxml", "--inactive", name)
	bus := addr[5:7]
	re := regexp.MustCompile(`(?s)<hostdev mode='subsystem' type='pci' managed='yes'>\s*<source>\s*<address domain='0x0000' bus='0x` + bus + `' slot='0x00' function='0x0'/>\s*</source>`)
	if !re.MatchString(xml) {
		t.Fatalf("domain XML has no managed hostdev for %s:\n%s", addr, xml)
	}
	if strings.Contains(xml, "one_time_use") || strings.Contains(xml, "HW_PCI") {
		t.Fatalf("burning reached the domain XML:\n%s", xml)
	}
	d, _ := inv.Show(ctx, addr)
	if d.Used != 1 || d.Reserved != 1 || d.ConsumerName != name {
		t.Fatalf("device after apply: %+v", d)
	}

	// A second instance: the publish fails after the define.
	name2 := testenv.UniqueDomainName(t) + "-2"
	testenv.CleanupDomain(t, uri, name2)
	e.FailPuts(true)
	if _, err := e.Apply("name: " + name2 + "\ndisks: [{name: vda, size: 8M}]\npci_aliases: [{name: gpu}]\n"); !errors.Is(err, controller.ErrInjected) {
		t.Fatalf("apply with the publish failing = %v", err)
	}
	e.FailPuts(false)
	nc, _ := inv.List(ctx, devices.Filter{NeedsCleaning: true})
	if len(nc) != 1 || nc[0].ConsumerName != name2 || nc[0].Address == addr {
		t.Fatalf("after the failed apply, needing cleaning: %+v; want the other gpu, released burned", nc)
	}
	if out := controller.Virsh(t, uri, "list", "--all", "--name"); strings.Contains(out, name2) {
		t.Fatalf("the failed apply left its domain: %s", out)
	}

	if err := e.Ctl().Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	nc, _ = inv.List(ctx, devices.Filter{NeedsCleaning: true})
	if len(nc) != 2 {
		t.Fatalf("after delete, %d need cleaning, want 2: %+v", len(nc), nc)
	}
}
