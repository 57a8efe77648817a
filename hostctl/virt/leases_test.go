package virt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"regexp"
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

func TestNetworkBridge(t *testing.T) {
	got, err := networkBridge(`<network><name>default</name><bridge name='virbr0' stp='on' delay='0'/><ip address='192.168.122.1'/></network>`)
	if err != nil || got != "virbr0" {
		t.Errorf("networkBridge = %q, %v; want virbr0", got, err)
	}
	if _, err := networkBridge(`<network><name>ext</name><forward mode='bridge'/></network>`); err == nil || !strings.Contains(err.Error(), "network ext has no bridge") {
		t.Errorf("network without a bridge: %v", err)
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
	if os.Geteuid() != 0 {
		testenv.Require(t, "root", "network namespaces, veth pairs and dhcp_release need root")
	}
	testenv.LookPath(t, DHCPReleaseTool) // test/setup installs dnsmasq-utils
	ctx := testCtx(t, 3*time.Minute)
	c := connect(t, uri, ConnOptions{})
	const network = "default"
	netXML := virsh(t, uri, "net-dumpxml", network)
	if out := virsh(t, uri, "net-info", network); !strings.Contains(out, "Active:         yes") {
		testenv.Require(t, "libvirt's default network", "it does not run (test/setup starts it):\n"+out)
	}
	m := regexp.MustCompile(`<bridge name='([^']+)'`).FindStringSubmatch(netXML)
	if m == nil {
		t.Fatalf("no bridge in the default network:\n%s", netXML)
	}
	bridge := m[1]

	ip := testenv.DefaultNetworkAddress(t, uri, testenv.AddrsVirt)
	other := testenv.DefaultNetworkAddress(t, uri, testenv.AddrsVirt) // macA asks for it while ip is taken
	b, a := newDHCPClient(t, bridge), newDHCPClient(t, bridge)
	b.waitForwarding(ctx)
	a.waitForwarding(ctx)

	if got := b.obtain(ctx, ip); got != ip {
		t.Fatalf("client %s asked for %s and got %s", b.mac, ip, got)
	}
	l := waitLease(t, ctx, c, network, ip, func(l *Lease) bool { return l != nil && l.MAC == b.mac })
	if l.Expiry.Before(time.Now()) {
		t.Errorf("lease %+v: expiry not in the future", *l)
	}
	t.Logf("dnsmasq leased %s to %s until %s", ip, b.mac, l.Expiry.Format(time.RFC3339))

	// The fixed-address case: a host entry ip -> macA while macB's lease
	// of ip runs.
	if err := c.AddDHCPHost(ctx, network, DHCPHost{MAC: a.mac, IP: ip}); err != nil {
		t.Fatalf("AddDHCPHost: %v", err)
	}
	t.Cleanup(func() { removeHostEntry(uri, network, a.mac) })
	leases, err := c.ActiveLeases(ctx, network)
	if err != nil {
		t.Fatalf("ActiveLeases: %v", err)
	}
	if i := slices.IndexFunc(leases, func(l Lease) bool { return l.IP == ip }); i < 0 || leases[i].MAC != b.mac {
		t.Fatalf("leases after the host entry %s -> %s: %+v; want %s held by %s", ip, a.mac, leases, ip, b.mac)
	}
	if got := a.obtain(ctx, other); got == ip {
		t.Fatalf("client %s got its configured address %s although %s holds a lease of it", a.mac, ip, b.mac)
	} else {
		t.Logf("dnsmasq gave %s %s, not its configured %s (leased to %s)", a.mac, got, ip, b.mac)
	}

	if err := c.ReleaseLease(ctx, network, ip, b.mac); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	waitLease(t, ctx, c, network, ip, func(l *Lease) bool { return l == nil })
	if got := a.obtain(ctx, other); got != ip {
		t.Errorf("after the release, client %s got %s; want its configured %s", a.mac, got, ip)
	}
	// A release that names no lease of dnsmasq's is no error.
	if err := c.ReleaseLease(ctx, network, ip, b.mac); err != nil {
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

// dhcpClient is a DHCP client on a libvirt network: a network namespace
// joined to the network's bridge by a veth pair, with a MAC of its own.
// Everything goes when the test ends, the client's leases too.
type dhcpClient struct {
	t                *testing.T
	ns, hostIf, nsIf string
	mac              string
	ipTool, busybox  string
	bridge           string
	obtained         []string
}

func newDHCPClient(t *testing.T, bridge string) *dhcpClient {
	t.Helper()
	var id [3]byte
	if _, err := rand.Read(id[:]); err != nil {
		t.Fatal(err)
	}
	s := hex.EncodeToString(id[:])
	mac, err := GenerateMAC()
	if err != nil {
		t.Fatal(err)
	}
	d := &dhcpClient{t: t, ns: "vmeta-lw-" + s, hostIf: "lw" + s + "h", nsIf: "lw" + s + "g", mac: mac,
		ipTool: testenv.LookPath(t, "ip"), busybox: testenv.LookPath(t, "busybox"), bridge: bridge}
	d.run(d.ipTool, "netns", "add", d.ns)
	t.Cleanup(func() {
		for _, ip := range d.obtained {
			_ = exec.Command(DHCPReleaseTool, d.bridge, ip, d.mac).Run()
		}
		_ = exec.Command(d.ipTool, "link", "del", d.hostIf).Run()
		_ = exec.Command(d.ipTool, "netns", "del", d.ns).Run()
	})
	d.run(d.ipTool, "link", "add", d.hostIf, "type", "veth", "peer", "name", d.nsIf)
	d.run(d.ipTool, "link", "set", d.nsIf, "netns", d.ns)
	d.run(d.ipTool, "link", "set", d.hostIf, "master", bridge)
	d.run(d.ipTool, "link", "set", d.hostIf, "up")
	d.run(d.ipTool, "-n", d.ns, "link", "set", d.nsIf, "address", mac)
	d.run(d.ipTool, "-n", d.ns, "link", "set", d.nsIf, "up")
	return d
}

func (d *dhcpClient) run(name string, args ...string) {
	d.t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		d.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// waitForwarding waits until the bridge forwards the client's frames: a
// new port of a bridge with STP on listens and learns first (twice the
// bridge's forward delay), and DHCP packets sent before go nowhere.
func (d *dhcpClient) waitForwarding(ctx context.Context) {
	d.t.Helper()
	const forwarding = "3" // BR_STATE_FORWARDING
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		b, err := os.ReadFile("/sys/class/net/" + d.hostIf + "/brport/state")
		if err != nil {
			d.t.Fatalf("bridge port %s: %v", d.hostIf, err)
		}
		if strings.TrimSpace(string(b)) == forwarding {
			return
		}
		select {
		case <-ctx.Done():
			d.t.Fatalf("bridge port %s of %s never forwarded (state %s)", d.hostIf, d.bridge, b)
		case <-tick.C:
		}
	}
}

var reObtained = regexp.MustCompile(`lease of (\S+) obtained`)

// obtain runs busybox udhcpc in the client's namespace, asking for the
// address want, until it obtains a lease (it configures nothing), and
// returns the address it got.
func (d *dhcpClient) obtain(ctx context.Context, want string) string {
	d.t.Helper()
	for {
		cmd := exec.CommandContext(ctx, d.ipTool, "netns", "exec", d.ns, d.busybox, "udhcpc",
			"-i", d.nsIf, "-n", "-q", "-s", "/bin/true", "-t", "5", "-T", "1", "-r", want)
		out, err := cmd.CombinedOutput()
		if m := reObtained.FindSubmatch(out); err == nil && m != nil {
			ip := string(m[1])
			d.obtained = append(d.obtained, ip)
			return ip
		}
		if ctx.Err() != nil {
			d.t.Fatalf("udhcpc for %s never obtained a lease: %v\n%s", d.mac, err, out)
		}
		d.t.Logf("udhcpc for %s: no lease yet (%v): %s", d.mac, err, bytesTail(out))
	}
}

func bytesTail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// removeHostEntry removes mac's host entry from network, live and from its
// definition, whatever the test left.
func removeHostEntry(uri, network, mac string) {
	for _, scope := range []string{"--live", "--config"} {
		_ = exec.Command("virsh", "-q", "-c", uri, "net-update", network, "delete", "ip-dhcp-host",
			fmt.Sprintf("<host mac='%s'/>", mac), scope).Run()
	}
}
