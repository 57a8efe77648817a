package nics

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/events"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// fakeDnsmasq is fakeNet with its DHCP servers' leases: active are the
// leases each network's server holds, released the releases asked for
// ("network ip mac"). fakeNet alone has neither (the interfaces are
// optional).
type fakeDnsmasq struct {
	*fakeNet
	active     map[string][]virt.Lease
	listErr    error
	releaseErr error
	released   []string
}

func newFakeDnsmasq() *fakeDnsmasq {
	return &fakeDnsmasq{fakeNet: newFakeNet(), active: map[string][]virt.Lease{}}
}

func (f *fakeDnsmasq) ActiveLeases(_ context.Context, n string) ([]virt.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.active[n]), f.listErr
}

func (f *fakeDnsmasq) ReleaseLease(_ context.Context, n, ip, mac string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, n+" "+ip+" "+mac)
	if f.releaseErr != nil {
		return f.releaseErr
	}
	f.active[n] = slices.DeleteFunc(f.active[n], func(l virt.Lease) bool { return l.IP == ip && l.MAC == mac })
	return nil
}

func (f *fakeDnsmasq) releases() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.released)
}

// leaseRecorder is the audit log (Emitter) and the part's logger, recorded.
type leaseRecorder struct {
	events []string // "stream type payload"
	log    bytes.Buffer
}

func (r *leaseRecorder) Emit(_ context.Context, stream, typ string, payload any) (events.Event, error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return events.Event{}, err
	}
	r.events = append(r.events, stream+" "+typ+" "+string(b))
	return events.Event{Type: typ, Payload: b}, nil
}

// warnings are the messages and attributes of the warnings logged.
func (r *leaseRecorder) warnings(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(r.log.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["level"] == "WARN" {
			delete(m, "time")
			delete(m, "level")
			out = append(out, m)
		}
	}
	return out
}

func newLeasePart(net Network) (*Part, *leaseRecorder) {
	rec := &leaseRecorder{}
	p := New(net, "")
	p.logger = slog.New(slog.NewJSONHandler(&rec.log, nil))
	p.UseEvents(rec)
	return p, rec
}

// fixedSpec is an instance whose NIC has a fixed address (ips), as CI's
// Debian guest had.
func fixedSpec(mac, addr string) *model.Instance {
	return &model.Instance{Name: "vm1", UUID: "0b0e2c1e-4d5c-4c2b-9a43-7d1f0e0e0001",
		NICs: []model.NIC{{MAC: mac, IPs: []model.IPConfig{{Address: addr + "/24"}}}}}
}

const (
	nicMAC    = "52:54:00:00:00:01"
	holderMAC = "52:54:00:99:00:01"
	fixedIP   = "192.168.122.228"
)

// TestStartReportsAddressLeasedElsewhere: a start whose NIC's fixed
// address the network's DHCP server has leased to another MAC logs a
// warning naming the instance, the NIC's MAC, the address, the holder's
// MAC and the lease's end, and emits an event on the instances stream;
// the start goes on. The NIC's own lease of it, or another MAC's lease of
// another address, is no warning; leases that cannot be listed are
// logged, and the start goes on.
func TestStartReportsAddressLeasedElsewhere(t *testing.T) {
	expiry := time.Date(2026, 11, 26, 20, 2, 38, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		active   []virt.Lease
		listErr  error
		events   []string
		warnings []map[string]any
	}{
		{name: "another MAC holds it", active: []virt.Lease{{MAC: holderMAC, IP: fixedIP, Expiry: expiry}},
			events: []string{`instances instance.address_leased {"name":"vm1","uuid":"0b0e2c1e-4d5c-4c2b-9a43-7d1f0e0e0001","network":"default","mac":"52:54:00:00:00:01","address":"192.168.122.228","holder_mac":"52:54:00:99:00:01","expires":"2026-11-26T20:02:38Z"}`},
			warnings: []map[string]any{{"msg": "a fixed address of the instance is leased to another MAC: the network's DHCP server gives the NIC a dynamic address instead until that lease ends or is released, and the metadata service will not know the guest by address",
				"instance": "vm1", "network": "default", "mac": nicMAC, "address": fixedIP, "holder_mac": holderMAC, "expires": "2026-11-26T20:02:38Z"}}},
		{name: "a lease without end", active: []virt.Lease{{MAC: holderMAC, IP: fixedIP}},
			events: []string{`instances instance.address_leased {"name":"vm1","uuid":"0b0e2c1e-4d5c-4c2b-9a43-7d1f0e0e0001","network":"default","mac":"52:54:00:00:00:01","address":"192.168.122.228","holder_mac":"52:54:00:99:00:01"}`},
			warnings: []map[string]any{{"msg": "a fixed address of the instance is leased to another MAC: the network's DHCP server gives the NIC a dynamic address instead until that lease ends or is released, and the metadata service will not know the guest by address",
				"instance": "vm1", "network": "default", "mac": nicMAC, "address": fixedIP, "holder_mac": holderMAC, "expires": "never"}}},
		{name: "its own MAC holds it", active: []virt.Lease{{MAC: nicMAC, IP: fixedIP, Expiry: expiry}}},
		{name: "another address", active: []virt.Lease{{MAC: holderMAC, IP: "192.168.122.28", Expiry: expiry}}},
		{name: "no leases"},
		{name: "leases not listed", listErr: errors.New("libvirtd unreachable"),
			warnings: []map[string]any{{"msg": "DHCP leases not checked: the network's leases could not be listed", "instance": "vm1", "network": "default", "err": "libvirtd unreachable"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFakeDnsmasq()
			f.active["default"], f.listErr = tc.active, tc.listErr
			p, rec := newLeasePart(f)
			in := fixedSpec(nicMAC, fixedIP)
			if _, err := p.Claim(ctx, part.Apply, &part.Instance{Spec: in}); err != nil {
				t.Fatal(err)
			}
			if err := p.Defined(ctx, part.Apply, &part.Instance{Spec: in}, revert.New(nil, "apply")); err != nil {
				t.Fatal(err)
			}
			if err := p.BeforeStart(ctx, &part.Instance{Spec: in}, revert.New(nil, "start")); err != nil {
				t.Fatalf("BeforeStart: %v; want the start to go on", err)
			}
			if _, live := f.state(); live != "map[default:[{52:54:00:00:00:01 192.168.122.228 }]]" {
				t.Errorf("live leases %s; want the fixed one live", live)
			}
			if !slices.Equal(rec.events, tc.events) {
				t.Errorf("events:\n%s\nwant:\n%s", strings.Join(rec.events, "\n"), strings.Join(tc.events, "\n"))
			}
			if got := rec.warnings(t); fmt.Sprint(got) != fmt.Sprint(tc.warnings) {
				t.Errorf("warnings:\n%v\nwant:\n%v", got, tc.warnings)
			}
		})
	}
}

// TestDeleteReleasesLeases: a delete releases the DHCP server's lease of
// each fixed address it removed, held by the NIC's MAC, only once the
// delete stands (AfterDelete); a failed release is logged and fails
// nothing; a delete that fails releases nothing, not even later.
func TestDeleteReleasesLeases(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (*fakeDnsmasq, *Part, *leaseRecorder, *model.Instance) {
		f := newFakeDnsmasq()
		p, rec := newLeasePart(f)
		in := spec("vm1", []string{"10.0.0.2", "10.0.0.3"}, "52:54:00:00:00:01", "52:54:00:00:00:02")
		in.NICs[1].Network = "other"
		if err := p.Defined(ctx, part.Apply, &part.Instance{Spec: in}, revert.New(nil, "apply")); err != nil {
			t.Fatal(err)
		}
		f.active["default"] = []virt.Lease{{MAC: "52:54:00:00:00:01", IP: "10.0.0.2"}}
		return f, p, rec, in
	}
	want := []string{"default 10.0.0.2 52:54:00:00:00:01", "other 10.0.0.3 52:54:00:00:00:02"}

	t.Run("released after the delete", func(t *testing.T) {
		f, p, rec, in := setup(t)
		r := revert.New(nil, "delete")
		if err := p.Remove(ctx, part.Delete, &part.Instance{Spec: in}, r); err != nil {
			t.Fatal(err)
		}
		if got := f.releases(); len(got) != 0 {
			t.Fatalf("released before the delete stands: %v", got)
		}
		r.Success()
		if err := p.AfterDelete(ctx, &part.Instance{Spec: in}); err != nil {
			t.Fatal(err)
		}
		if got := f.releases(); !slices.Equal(got, want) {
			t.Errorf("released %v; want %v", got, want)
		}
		if len(f.active["default"]) != 0 {
			t.Errorf("leases left: %v", f.active["default"])
		}
		if err := p.AfterDelete(ctx, &part.Instance{Spec: in}); err != nil || len(f.releases()) != len(want) {
			t.Errorf("a second AfterDelete: %v, released %v; want nothing more", err, f.releases())
		}
		if w := rec.warnings(t); len(w) != 0 {
			t.Errorf("warnings: %v", w)
		}
	})

	t.Run("a failed release fails nothing", func(t *testing.T) {
		f, p, rec, in := setup(t)
		f.releaseErr = errors.New("dhcp_release not found (install the dnsmasq-utils package)")
		r := revert.New(nil, "delete")
		if err := p.Remove(ctx, part.Delete, &part.Instance{Spec: in}, r); err != nil {
			t.Fatal(err)
		}
		r.Success()
		if err := p.AfterDelete(ctx, &part.Instance{Spec: in}); err != nil {
			t.Fatalf("AfterDelete: %v; want no error", err)
		}
		if got := f.releases(); !slices.Equal(got, want) {
			t.Errorf("release tried %v; want %v", got, want)
		}
		w := rec.warnings(t)
		if len(w) != 2 || w[0]["address"] != "10.0.0.2" || w[0]["mac"] != "52:54:00:00:00:01" || !strings.Contains(fmt.Sprint(w[0]["err"]), "dnsmasq-utils") {
			t.Errorf("warnings %v; want one per lease, naming it and the error", w)
		}
	})

	t.Run("a failed delete releases nothing", func(t *testing.T) {
		f, p, _, in := setup(t)
		r := revert.New(nil, "delete")
		if err := p.Remove(ctx, part.Delete, &part.Instance{Spec: in}, r); err != nil {
			t.Fatal(err)
		}
		r.Fail(nil)
		// The instance stays; its next apply stands.
		if notes := p.Committed(ctx, part.Apply, &part.Instance{Spec: in}); len(notes) != 0 {
			t.Errorf("notes %v", notes)
		}
		if err := p.AfterDelete(ctx, &part.Instance{Spec: in}); err != nil {
			t.Fatal(err)
		}
		if got := f.releases(); len(got) != 0 {
			t.Errorf("released %v after a failed delete", got)
		}
	})
}

// TestApplyReleasesRemovedLease: an apply that gives a NIC another MAC
// (or drops it) releases the old MAC's lease of the address once it
// stands (Committed), not before; a lease the instance has again is not
// released; an apply that fails releases nothing.
func TestApplyReleasesRemovedLease(t *testing.T) {
	ctx := context.Background()
	f := newFakeDnsmasq()
	p, _ := newLeasePart(f)
	old := fixedSpec(nicMAC, fixedIP)
	if err := p.Defined(ctx, part.Apply, &part.Instance{Spec: old}, revert.New(nil, "apply")); err != nil {
		t.Fatal(err)
	}
	next := fixedSpec("52:54:00:00:00:0f", fixedIP)

	r := revert.New(nil, "apply")
	if err := p.Defined(ctx, part.Apply, &part.Instance{Spec: next, Old: old}, r); err != nil {
		t.Fatal(err)
	}
	r.Fail(nil)
	p.Committed(ctx, part.Apply, &part.Instance{Spec: old})
	if got := f.releases(); len(got) != 0 {
		t.Fatalf("released %v after a failed apply", got)
	}

	r = revert.New(nil, "apply")
	if err := p.Defined(ctx, part.Apply, &part.Instance{Spec: next, Old: old}, r); err != nil {
		t.Fatal(err)
	}
	if got := f.releases(); len(got) != 0 {
		t.Fatalf("released %v before the apply stands", got)
	}
	r.Success()
	p.Committed(ctx, part.Apply, &part.Instance{Spec: next})
	if got, want := f.releases(), []string{"default " + fixedIP + " " + nicMAC}; !slices.Equal(got, want) {
		t.Errorf("released %v; want %v", got, want)
	}

	// The NIC goes back to its first MAC while a release of that lease is
	// still noted (a NIC hot-plug has no Committed): it is not released.
	r = revert.New(nil, "apply")
	if err := p.Defined(ctx, part.Apply, &part.Instance{Spec: old, Old: next}, r); err != nil {
		t.Fatal(err)
	}
	r.Success()
	r = revert.New(nil, "apply")
	if err := p.Defined(ctx, part.Apply, &part.Instance{Spec: next, Old: old}, r); err != nil {
		t.Fatal(err)
	}
	r.Success()
	p.Committed(ctx, part.Apply, &part.Instance{Spec: next})
	want := []string{"default " + fixedIP + " " + nicMAC, "default " + fixedIP + " " + nicMAC}
	if got := f.releases(); !slices.Equal(got, want) {
		t.Errorf("released %v; want %v", got, want)
	}
}

// A network without the lease interfaces (fakeNet alone) reports and
// releases nothing, and fails nothing.
func TestLeasesWithoutDnsmasq(t *testing.T) {
	ctx := context.Background()
	p, rec := newLeasePart(newFakeNet())
	in := fixedSpec(nicMAC, fixedIP)
	if err := p.Defined(ctx, part.Apply, &part.Instance{Spec: in}, revert.New(nil, "apply")); err != nil {
		t.Fatal(err)
	}
	if err := p.BeforeStart(ctx, &part.Instance{Spec: in}, revert.New(nil, "start")); err != nil {
		t.Fatal(err)
	}
	r := revert.New(nil, "delete")
	if err := p.Remove(ctx, part.Delete, &part.Instance{Spec: in}, r); err != nil {
		t.Fatal(err)
	}
	r.Success()
	if err := p.AfterDelete(ctx, &part.Instance{Spec: in}); err != nil {
		t.Fatal(err)
	}
	if len(rec.events) != 0 || len(p.pending) != 0 {
		t.Errorf("events %v, pending %v", rec.events, p.pending)
	}
}
