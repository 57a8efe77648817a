package virt

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/vmeta/vmeta/internal/testenv"
)

func TestReleaseArgs(t *testing.T) {
	for _, tc := range []struct {
		ip, mac string
		want    []string
		err     string
	}{
		{ip: "192.168.122.5", mac: "52:54:00:AA:bb:01", want: []string{"virbr0", "192.168.122.5", "52:54:00:aa:bb:01"}},
		{ip: "fd00::5", mac: "52:54:00:aa:bb:01", err: `address "fd00::5": not an IPv4 address`},
		{ip: "192.168.122.5/24", mac: "52:54:00:aa:bb:01", err: `address "192.168.122.5/24": not an IPv4 address`},
		{ip: "192.168.122.5", mac: "-x", err: `MAC "-x": not a MAC address`},
	} {
		got, err := releaseArgs("virbr0", tc.ip, tc.mac)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("releaseArgs(%q, %q) = %v, %v; want error %q", tc.ip, tc.mac, got, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("releaseArgs(%q, %q) = %v, %v; want %v", tc.ip, tc.mac, got, err, tc.want)
		}
	}
}

func TestToLease(t *testing.T) {
	got := toLease(libvirt.NetworkDhcpLease{Iface: "virbr0", Expirytime: 1764190000, Mac: []string{"52:54:00:AA:BB:01"}, Ipaddr: "192.168.122.9", Prefix: 24, Hostname: []string{"web-1"}})
	want := Lease{MAC: "52:54:00:aa:bb:01", IP: "192.168.122.9", Expiry: time.Unix(1764190000, 0).UTC(), Hostname: "web-1"}
	if got != want {
		t.Errorf("toLease = %+v; want %+v", got, want)
	}
	if got := toLease(libvirt.NetworkDhcpLease{Ipaddr: "192.168.122.9"}); !got.Expiry.IsZero() || got.MAC != "" {
		t.Errorf("lease without expiry or MAC: %+v", got)
	}
}

// TestReleaseLeaseWithoutTool: without dhcp_release the error says which
// package brings it, and libvirtd is not asked anything.
func TestReleaseLeaseWithoutTool(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	u, _ := url.Parse(DefaultURI)
	c := &Conn{uri: u, where: DefaultSocket}
	err := c.ReleaseLease(t.Context(), "default", "192.168.122.5", "52:54:00:aa:bb:01")
	if !errors.Is(err, ErrNoDHCPRelease) || !strings.Contains(err.Error(), "dnsmasq-utils") {
		t.Fatalf("ReleaseLease without %s: %v; want ErrNoDHCPRelease naming dnsmasq-utils", DHCPReleaseTool, err)
	}
	remote, _ := url.Parse("qemu+ssh://other/system")
	c = &Conn{uri: remote, where: remote.String()}
	if err := c.ReleaseLease(t.Context(), "default", "192.168.122.5", "52:54:00:aa:bb:01"); err == nil || !strings.Contains(err.Error(), "not on this machine") {
		t.Errorf("ReleaseLease through a remote libvirtd: %v; want a refusal", err)
	}
}

// TestDHCPLeasesAgainstDnsmasq (real libvirtd, its default network's
// dnsmasq, real DHCP clients): a client in a network namespace, joined to
// the network's bridge by a veth pair, obtains a lease; ActiveLeases lists
// it. A fixed host entry ip -> macA added while macB holds ip changes
// nothing of that: ActiveLeases still shows macB holding ip (what the nics
// part's warning relies on), and dnsmasq gives macA's client another
// address (the defect the warning reports). ReleaseLease ends macB's lease
// at once, and macA's client then gets its configured address.
func TestDHCPLeasesAgainstDnsmasq(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	testenv.LookPath(t, DHCPReleaseTool) // test/setup installs dnsmasq-utils
	const network = "default"
	bridge := testenv.DefaultNetworkBridge(t, uri)
	ctx := testCtx(t, 3*time.Minute)
	c := connect(t, uri, ConnOptions{})

	ip := testenv.DefaultNetworkAddress(t, uri, testenv.AddrsVirt)
	other := testenv.DefaultNetworkAddress(t, uri, testenv.AddrsVirt) // macA asks for it while ip is taken
	b, a := testenv.NewDHCPClient(t, bridge), testenv.NewDHCPClient(t, bridge)

	if got := b.Obtain(ctx, ip); got != ip {
		t.Fatalf("client %s asked for %s and got %s", b.MAC, ip, got)
	}
	l := waitLease(t, ctx, c, network, ip, func(l *Lease) bool { return l != nil && l.MAC == b.MAC })
	if l.Expiry.Before(time.Now()) {
		t.Errorf("lease %+v: expiry not in the future", *l)
	}
	t.Logf("dnsmasq leased %s to %s until %s", ip, b.MAC, l.Expiry.Format(time.RFC3339))

	// The fixed-address case: a host entry ip -> macA while macB's lease
	// of ip runs.
	if err := c.AddDHCPHost(ctx, network, DHCPHost{MAC: a.MAC, IP: ip}); err != nil {
		t.Fatalf("AddDHCPHost: %v", err)
	}
	t.Cleanup(func() { removeHostEntry(uri, network, a.MAC) })
	leases, err := c.ActiveLeases(ctx, network)
	if err != nil {
		t.Fatalf("ActiveLeases: %v", err)
	}
	if i := slices.IndexFunc(leases, func(l Lease) bool { return l.IP == ip }); i < 0 || leases[i].MAC != b.MAC {
		t.Fatalf("leases after the host entry %s -> %s: %+v; want %s held by %s", ip, a.MAC, leases, ip, b.MAC)
	}
	if got := a.Obtain(ctx, other); got == ip {
		t.Fatalf("client %s got its configured address %s although %s holds a lease of it", a.MAC, ip, b.MAC)
	} else {
		t.Logf("dnsmasq gave %s %s, not its configured %s (leased to %s)", a.MAC, got, ip, b.MAC)
	}

	if err := c.ReleaseLease(ctx, network, ip, b.MAC); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	waitLease(t, ctx, c, network, ip, func(l *Lease) bool { return l == nil })
	if got := a.Obtain(ctx, other); got != ip {
		t.Errorf("after the release, client %s got %s; want its configured %s", a.MAC, got, ip)
	}
	// A release that names no lease of dnsmasq's is no error.
	if err := c.ReleaseLease(ctx, network, ip, b.MAC); err != nil {
		t.Errorf("ReleaseLease of a lease already gone: %v", err)
	}
}

// waitLease polls network's leases until ok accepts the one of ip (nil:
// none), and returns it; it fails the test at ctx's end.
func waitLease(t *testing.T, ctx context.Context, c *Conn, network, ip string, ok func(*Lease) bool) *Lease {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var leases []Lease
	for {
		var err error
		if leases, err = c.ActiveLeases(ctx, network); err != nil {
			t.Fatalf("ActiveLeases: %v", err)
		}
		var l *Lease
		if i := slices.IndexFunc(leases, func(l Lease) bool { return l.IP == ip }); i >= 0 {
			l = &leases[i]
		}
		if ok(l) {
			return l
		}
		select {
		case <-ctx.Done():
			t.Fatalf("leases of %s never became as expected: %+v", ip, leases)
		case <-tick.C:
		}
	}
}

// removeHostEntry removes mac's host entry from network, live and from its
// definition, whatever the test left.
func removeHostEntry(uri, network, mac string) {
	for _, scope := range []string{"--live", "--config"} {
		_ = exec.Command("virsh", "-q", "-c", uri, "net-update", network, "delete", "ip-dhcp-host",
			fmt.Sprintf("<host mac='%s'/>", mac), scope).Run()
	}
}
