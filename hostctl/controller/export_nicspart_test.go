package controller

import (
	"context"
	"log/slog"
	"testing"

	"github.com/vmeta/vmeta/hostctl/devices"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/nics"
	"github.com/vmeta/vmeta/hostctl/parts/passthrough"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/store"
)

// The parts the daemon registers that the harness's tests count on
// (hostctl/parts/passthrough: claims, burns and releases of passthrough
// devices; hostctl/parts/nics: the NICs' DHCP leases), registered as the
// daemon does (hostctl/daemon/parts.go) over the harness's hypervisor;
// and what the passthrough tests (devices_test.go, devicestart_test.go,
// package controller_test) drive the harness with.

// registerParts gives e's controller the passthrough part (without an
// inventory until withInventory), the nics part over net (its MAC claims
// in e's store, as the daemon does: daemon/macs.go), the media part
// (export_media_test.go) and the faults part (export_devchange_test.go).
func registerParts(e *env, net nics.Network) {
	n := nics.New(net, "")
	n.UseStore(e.st, slog.New(slog.DiscardHandler))
	// The states part first, as the daemon registers it (export_vmstate_test.go).
	e.c.parts = []part.Part{boundStates(e.c), boundPassthrough(e, nil), n, mediaPart(e, net), faultsPart(e.c)}
	withDisks(e) // export_diskpart_test.go
}

// withInventory replaces e's passthrough part by one over inv.
func withInventory(e *env, inv passthrough.Inventory) {
	for i, p := range e.c.parts {
		if _, ok := p.(*passthrough.Part); ok {
			e.c.parts[i] = boundPassthrough(e, inv)
			return
		}
	}
	e.c.parts = append([]part.Part{boundPassthrough(e, inv)}, e.c.parts...)
}

func boundPassthrough(e *env, inv passthrough.Inventory) *passthrough.Part {
	p := passthrough.New(inv)
	defs, _ := e.c.domains.(passthrough.Definitions) // the harness's hypervisor, as the daemon hands libvirt's
	p.Bind(e.c, defs, slog.New(slog.DiscardHandler))
	return p
}

// withDevices gives e's controller an inventory of two one-time-use gpus
// (the device records in e's own bolt store, through wrap when not nil).
func withDevices(t *testing.T, e *env, wrap ...func(devices.Store) devices.Store) *devices.Inventory {
	t.Helper()
	ds, ok := e.st.Store.(devices.Store)
	if !ok {
		t.Fatalf("%T has no record groups", e.st.Store)
	}
	for _, w := range wrap {
		ds = w(ds)
	}
	spec, err := devices.ParseSpec([]byte(`[{"vendor_id":"10de","alias":"gpu","one_time_use":true}]`))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := devices.New(ds, devices.Options{Host: "h1", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	found := []devices.Found{
		{Address: "0000:3b:00.0", VendorID: "10de", ProductID: "20b5", Class: "030200"},
		{Address: "0000:3c:00.0", VendorID: "10de", ProductID: "20b5", Class: "030200"},
	}
	if _, err := inv.Sync(t.Context(), found); err != nil {
		t.Fatal(err)
	}
	withInventory(e, inv)
	return inv
}

// ErrInjected is the failure the harness injects.
var ErrInjected = errInjected

// RealEnv is the harness over the real libvirtd (realEnv), and its URI.
func RealEnv(t *testing.T) (*Env, string) { return realEnv(t) }

// Virsh runs virsh against uri and returns its output (virshOut).
func Virsh(t *testing.T, uri string, args ...string) string {
	t.Helper()
	return virshOut(t, uri, args...)
}

// WithDevices gives the harness's controller an inventory of two
// one-time-use gpus (withDevices).
func (e *env) WithDevices(wrap ...func(devices.Store) devices.Store) *devices.Inventory {
	e.t.Helper()
	return withDevices(e.t, e, wrap...)
}

// DeviceStore is the harness's store as the device inventory's.
func (e *env) DeviceStore() devices.Store {
	e.t.Helper()
	ds, ok := e.st.Store.(devices.Store)
	if !ok {
		e.t.Fatalf("%T has no record groups", e.st.Store)
	}
	return ds
}

// UseInventory gives the harness's controller the passthrough part over
// inv.
func (e *env) UseInventory(inv passthrough.Inventory) { withInventory(e, inv) }

// Record is the stored record of instance name.
func (e *env) Record(ctx context.Context, name string) (store.Instance, error) {
	return e.st.Instance(ctx, name)
}

// FailPuts makes the store's publishes fail (ErrInjected) while on.
func (e *env) FailPuts(on bool) { e.st.failPut = on }

// FailNextStarts makes the fake hypervisor's next n domain starts fail
// (ErrInjected).
func (e *env) FailNextStarts(n int) {
	e.hv.mu.Lock()
	defer e.hv.mu.Unlock()
	e.hv.failStarts = n
}

// Domain is the fake hypervisor's domain name: its persistent XML and
// whether it runs (ok false: no such domain).
func (e *env) Domain(name string) (xml string, running, ok bool) {
	e.hv.mu.Lock()
	defer e.hv.mu.Unlock()
	d, ok := e.hv.domains[name]
	if !ok {
		return "", false, false
	}
	return d.xml, d.running, true
}

// DomainCount is how many domains the fake hypervisor has.
func (e *env) DomainCount() int {
	e.hv.mu.Lock()
	defer e.hv.mu.Unlock()
	return len(e.hv.domains)
}

// DetachFromDefinition takes the device element x out of the persistent
// definition of domain name.
func (e *env) DetachFromDefinition(ctx context.Context, name string, x []byte) error {
	return e.c.hotplug.DetachDevice(ctx, name, x, virt.AffectConfig)
}

// PreStart runs what Start runs before it takes the instance's lock (the
// parts' PreStart).
func (e *env) PreStart(ctx context.Context, name string) error {
	return e.c.PreStart(ctx, part.Start, name)
}
