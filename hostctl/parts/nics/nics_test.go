package nics

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// fakeNet is libvirt's networks as the part sees them: conf are the
// networks' persistent definitions, live what their running dnsmasq
// hands out; live updates are counted.
type fakeNet struct {
	mu      sync.Mutex
	conf    map[string][]virt.DHCPHost
	live    map[string][]virt.DHCPHost
	running map[string]bool
	updates int // live updates (each reloads the network)
}

func newFakeNet() *fakeNet {
	return &fakeNet{conf: map[string][]virt.DHCPHost{"default": nil, "other": nil}, live: map[string][]virt.DHCPHost{}, running: map[string]bool{}}
}

func (f *fakeNet) State(_ context.Context, name string) (virt.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running[name] {
		return virt.StateRunning, nil
	}
	return virt.StateShutoff, nil
}

func (f *fakeNet) DHCPHosts(_ context.Context, n string) ([]virt.DHCPHost, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	hs, ok := f.conf[n]
	if !ok {
		return nil, fmt.Errorf("network %s: %w", n, virt.ErrNotFound)
	}
	return slices.Clone(hs), nil
}

// AddDHCPHost writes both (what a *virt.Conn without LiveDHCP does).
func (f *fakeNet) AddDHCPHost(ctx context.Context, n string, h virt.DHCPHost) error {
	if err := f.AddDHCPHostConfig(ctx, n, h); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.live[n] = append(f.live[n], h)
	f.updates++
	return nil
}

func (f *fakeNet) RemoveDHCPHost(_ context.Context, n, mac string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	drop := func(h virt.DHCPHost) bool { return h.MAC == mac }
	f.conf[n] = slices.DeleteFunc(f.conf[n], drop)
	if slices.ContainsFunc(f.live[n], drop) {
		f.live[n] = slices.DeleteFunc(f.live[n], drop)
		f.updates++
	}
	return nil
}

func (f *fakeNet) AddDHCPHostConfig(_ context.Context, n string, h virt.DHCPHost) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	hs, ok := f.conf[n]
	if !ok {
		return fmt.Errorf("network %s: %w", n, virt.ErrNotFound)
	}
	if slices.ContainsFunc(hs, func(e virt.DHCPHost) bool { return e.MAC == h.MAC || e.IP == h.IP }) {
		return fmt.Errorf("%w: %s", virt.ErrConflict, h.MAC)
	}
	f.conf[n] = append(hs, h)
	return nil
}

func (f *fakeNet) LiveDHCPHosts(_ context.Context, n string) ([]virt.DHCPHost, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.live[n]), nil
}

func (f *fakeNet) SyncLiveDHCPHosts(_ context.Context, n string, macs []string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	count := 0
	for _, mac := range macs {
		ci := slices.IndexFunc(f.conf[n], func(h virt.DHCPHost) bool { return h.MAC == mac })
		li := slices.IndexFunc(f.live[n], func(h virt.DHCPHost) bool { return h.MAC == mac })
		switch {
		case ci < 0 && li < 0, ci >= 0 && li >= 0 && f.conf[n][ci] == f.live[n][li]:
			continue
		case ci >= 0:
			f.live[n] = append(slices.DeleteFunc(f.live[n], func(h virt.DHCPHost) bool { return h.MAC == mac }), f.conf[n][ci])
		default:
			f.live[n] = slices.Delete(f.live[n], li, li+1)
		}
		f.updates++
		count++
	}
	return count, nil
}

func (f *fakeNet) RemoveLiveDHCPHost(_ context.Context, n, mac string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i := slices.IndexFunc(f.live[n], func(h virt.DHCPHost) bool { return h.MAC == mac }); i >= 0 {
		f.live[n] = slices.Delete(f.live[n], i, i+1)
		f.updates++
	}
	return nil
}

func (f *fakeNet) state() (string, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	live := map[string][]virt.DHCPHost{}
	for n, hs := range f.live {
		if len(hs) > 0 {
			live[n] = hs
		}
	}
	return fmt.Sprint(f.conf), fmt.Sprint(live)
}

// TestLeases: a NIC with a static IPv4 address gets its first one; the
// other NICs, in order, get the instance's IPv4 addresses no static one
// takes (never loopback or link-local); a NIC without a MAC or an address
// gets none; a NIC without a network is on the default one.
func TestLeases(t *testing.T) {
	p := New(newFakeNet(), "")
	for _, tc := range []struct {
		name string
		in   *model.Instance
		want []lease
	}{
		{"nil", nil, nil},
		{"static first, then the pool", &model.Instance{
			Addresses: []string{"127.0.0.5", "169.254.1.1", "10.0.0.9", "fd00::1", "10.0.0.2"},
			NICs: []model.NIC{
				{MAC: "52:54:00:00:00:0A"},
				{MAC: "52:54:00:00:00:0b", Network: "other", IPs: []model.IPConfig{{Address: "fd00::2/64"}, {Address: "10.0.0.9/24"}}},
				{MAC: "52:54:00:00:00:0c"},
				{MAC: "52:54:00:00:00:0d"},
			}},
			[]lease{{"default", "52:54:00:00:00:0a", "10.0.0.2"}, {"other", "52:54:00:00:00:0b", "10.0.0.9"}}},
		{"no MAC yet", &model.Instance{Addresses: []string{"10.0.0.2"}, NICs: []model.NIC{{}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.leases(tc.in); !slices.Equal(got, tc.want) {
				t.Errorf("leases %v, want %v", got, tc.want)
			}
		})
	}
	if got := New(nil, "br-net").leases(&model.Instance{Addresses: []string{"10.0.0.2"}, NICs: []model.NIC{{MAC: "52:54:00:00:00:01"}}}); len(got) != 1 || got[0].network != "br-net" {
		t.Errorf("default network: %v", got)
	}
}

func spec(name string, addrs []string, macs ...string) *model.Instance {
	in := &model.Instance{Name: name, Addresses: addrs}
	for _, m := range macs {
		in.NICs = append(in.NICs, model.NIC{MAC: m})
	}
	return in
}

// An apply writes the leases into the networks' definitions only (no
// live update) while the domain is shut off, at once live when it runs;
// a failed apply takes back both. A changed NIC's lease goes, restored
// when the apply fails.
func TestDefined(t *testing.T) {
	ctx := context.Background()
	f := newFakeNet()
	p := New(f, "")
	in := spec("vm1", []string{"10.0.0.2"}, "52:54:00:00:00:01")
	r := revert.New(nil, "apply")
	if err := p.Defined(ctx, part.Apply, &part.Instance{Spec: in}, r); err != nil {
		t.Fatal(err)
	}
	if conf, live := f.state(); conf != "map[default:[{52:54:00:00:00:01 10.0.0.2 }] other:[]]" || live != "map[]" || f.updates != 0 {
		t.Fatalf("after a shut-off apply: conf %s, live %s, %d live updates", conf, live, f.updates)
	}
	r.Success()

	// Running: the new NIC's lease is live at once; a failed apply
	// leaves the networks as they were, the old lease back.
	before, beforeLive := f.state()
	f.running["vm1"] = true
	next := spec("vm1", []string{"10.0.0.3"}, "52:54:00:00:00:02")
	r = revert.New(nil, "apply")
	if err := p.Defined(ctx, part.Apply, &part.Instance{Spec: next, Old: in}, r); err != nil {
		t.Fatal(err)
	}
	if conf, live := f.state(); conf != "map[default:[{52:54:00:00:00:02 10.0.0.3 }] other:[]]" || live != "map[default:[{52:54:00:00:00:02 10.0.0.3 }]]" {
		t.Fatalf("after a running apply: conf %s, live %s", conf, live)
	}
	r.Fail(nil)
	if conf, live := f.state(); conf != before || live != beforeLive {
		t.Errorf("after the failed apply: conf %s, live %s; want %s, %s", conf, live, before, beforeLive)
	}
}

// BeforeStart brings the leases live; a failed start takes back what it
// brought, not a lease that was live before; a second start makes no
// live update.
func TestBeforeStart(t *testing.T) {
	ctx := context.Background()
	f := newFakeNet()
	p := New(f, "")
	in := spec("vm1", []string{"10.0.0.2", "10.0.0.3"}, "52:54:00:00:00:01", "52:54:00:00:00:02")
	if err := p.Defined(ctx, part.Apply, &part.Instance{Spec: in}, revert.New(nil, "apply")); err != nil {
		t.Fatal(err)
	}
	// One lease already live (the network was restarted since).
	if _, err := f.SyncLiveDHCPHosts(ctx, "default", []string{"52:54:00:00:00:01"}); err != nil {
		t.Fatal(err)
	}
	r := revert.New(nil, "start")
	if err := p.BeforeStart(ctx, &part.Instance{Spec: in}, r); err != nil {
		t.Fatal(err)
	}
	if _, live := f.state(); live != "map[default:[{52:54:00:00:00:01 10.0.0.2 } {52:54:00:00:00:02 10.0.0.3 }]]" {
		t.Fatalf("before the start: live %s", live)
	}
	r.Fail(nil) // the start failed
	if _, live := f.state(); live != "map[default:[{52:54:00:00:00:01 10.0.0.2 }]]" {
		t.Fatalf("after the failed start: live %s; want only the lease live before", live)
	}
	r = revert.New(nil, "start")
	if err := p.BeforeStart(ctx, &part.Instance{Spec: in}, r); err != nil {
		t.Fatal(err)
	}
	r.Success()
	n := f.updates
	if err := p.BeforeStart(ctx, &part.Instance{Spec: in}, revert.New(nil, "start")); err != nil || f.updates != n {
		t.Errorf("second start: %v, %d live updates", err, f.updates-n)
	}
}

// Remove takes the leases off the networks; a failed delete puts them
// back as they were (in the definition, and live if they were); a
// network that is gone has nothing to remove.
func TestRemove(t *testing.T) {
	ctx := context.Background()
	f := newFakeNet()
	p := New(f, "")
	in := spec("vm1", []string{"10.0.0.2", "10.0.0.3"}, "52:54:00:00:00:01", "52:54:00:00:00:02")
	in.NICs[1].Network = "gone"
	f.conf["gone"] = nil
	if err := p.Defined(ctx, part.Apply, &part.Instance{Spec: in}, revert.New(nil, "apply")); err != nil {
		t.Fatal(err)
	}
	if err := p.BeforeStart(ctx, &part.Instance{Spec: in}, revert.New(nil, "start")); err != nil {
		t.Fatal(err)
	}
	delete(f.conf, "gone")
	delete(f.live, "gone")
	before, beforeLive := f.state()
	r := revert.New(nil, "delete")
	if err := p.Remove(ctx, part.Delete, &part.Instance{Spec: in}, r); err != nil {
		t.Fatal(err)
	}
	if conf, live := f.state(); conf != "map[default:[] other:[]]" || live != "map[]" {
		t.Fatalf("after remove: conf %s, live %s", conf, live)
	}
	r.Fail(nil)
	if conf, live := f.state(); conf != before || live != beforeLive {
		t.Errorf("after the failed delete: conf %s, live %s; want %s, %s", conf, live, before, beforeLive)
	}
}

// Without a hypervisor (--virt none) the part does nothing: no lease,
// and the static addresses are not added (the spec's addresses stand).
// With one, Claim adds each NIC's static IPv4 address.
func TestClaimStaticAddresses(t *testing.T) {
	ctx := context.Background()
	mk := func() *model.Instance {
		return &model.Instance{Name: "vm1", Addresses: []string{"10.0.0.2"},
			NICs: []model.NIC{{MAC: "52:54:00:00:00:01", IPs: []model.IPConfig{{Address: "10.0.0.7/24"}}}, {MAC: "52:54:00:00:00:02", IPs: []model.IPConfig{{Address: "10.0.0.2/24"}}}}}
	}
	in := mk()
	end, err := New(nil, "").Claim(ctx, part.Apply, &part.Instance{Spec: in})
	if err != nil {
		t.Fatal(err)
	}
	end(ctx, nil)
	if !slices.Equal(in.Addresses, []string{"10.0.0.2"}) {
		t.Errorf("without a hypervisor: addresses %v", in.Addresses)
	}
	if err := New(nil, "").Defined(ctx, part.Apply, &part.Instance{Spec: in}, revert.New(nil, "apply")); err != nil {
		t.Errorf("without a hypervisor: %v", err)
	}
	in = mk()
	if _, err := New(newFakeNet(), "").Claim(ctx, part.Apply, &part.Instance{Spec: in}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(in.Addresses, []string{"10.0.0.2", "10.0.0.7"}) {
		t.Errorf("addresses %v, want the static one added once", in.Addresses)
	}
}

// A network the spec names that libvirt does not have fails the apply,
// naming the lease.
func TestUnknownNetwork(t *testing.T) {
	in := spec("vm1", []string{"10.0.0.2"}, "52:54:00:00:00:01")
	in.NICs[0].Network = "nope"
	err := New(newFakeNet(), "").Defined(context.Background(), part.Apply, &part.Instance{Spec: in}, revert.New(nil, "apply"))
	if !errors.Is(err, virt.ErrNotFound) || err.Error() != "DHCP lease 52:54:00:00:00:01 -> 10.0.0.2 on network nope: network nope: not found" {
		t.Errorf("err = %v", err)
	}
}
