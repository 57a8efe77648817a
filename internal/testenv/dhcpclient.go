package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// DHCPClient is a real DHCP client (busybox udhcpc) on a libvirt
// network: a network namespace joined to the network's bridge by a veth
// pair, with a MAC of its own (MAC, 52:54:00:…). When the test ends the
// namespace and the veth pair go, and the leases it obtained are released
// (dhcp_release, when installed).
type DHCPClient struct {
	MAC string

	t                testing.TB
	ns, hostIf, nsIf string
	bridge           string
	ipTool, busybox  string
	forwarding       bool
	obtained         []string
}

// NewDHCPClient makes a DHCP client on bridge (DefaultNetworkBridge). It
// needs root (network namespaces): without it the test stops through
// Require.
func NewDHCPClient(t testing.TB, bridge string) *DHCPClient {
	t.Helper()
	if os.Geteuid() != 0 {
		Require(t, "root", "a DHCP client in a network namespace needs root (ip netns, veth pairs)")
	}
	var id [6]byte
	if _, err := rand.Read(id[:]); err != nil {
		t.Fatal(err)
	}
	s := hex.EncodeToString(id[:3])
	d := &DHCPClient{
		MAC: fmt.Sprintf("52:54:00:%02x:%02x:%02x", id[3], id[4], id[5]),
		t:   t, ns: "vmeta-dhcp-" + s, hostIf: "vmd" + s + "h", nsIf: "vmd" + s + "g", bridge: bridge,
		ipTool: LookPath(t, "ip"), busybox: LookPath(t, "busybox"),
	}
	d.run(d.ipTool, "netns", "add", d.ns)
	t.Cleanup(func() {
		if rel, err := exec.LookPath("dhcp_release"); err == nil {
			for _, ip := range d.obtained {
				_ = exec.Command(rel, d.bridge, ip, d.MAC).Run()
			}
		}
		_ = exec.Command(d.ipTool, "link", "del", d.hostIf).Run()
		_ = exec.Command(d.ipTool, "netns", "del", d.ns).Run()
	})
	d.run(d.ipTool, "link", "add", d.hostIf, "type", "veth", "peer", "name", d.nsIf)
	d.run(d.ipTool, "link", "set", d.nsIf, "netns", d.ns)
	d.run(d.ipTool, "link", "set", d.hostIf, "master", bridge)
	d.run(d.ipTool, "link", "set", d.hostIf, "up")
	d.run(d.ipTool, "-n", d.ns, "link", "set", d.nsIf, "address", d.MAC)
	d.run(d.ipTool, "-n", d.ns, "link", "set", d.nsIf, "up")
	return d
}

func (d *DHCPClient) run(name string, args ...string) {
	d.t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		d.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// waitForwarding waits until the bridge forwards the client's frames: a
// new port of a bridge with STP on listens and learns first (twice the
// bridge's forward delay, 4 s for libvirt's), and DHCP packets sent
// before go nowhere.
func (d *DHCPClient) waitForwarding(ctx context.Context) {
	d.t.Helper()
	const forwarding = "3" // BR_STATE_FORWARDING
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !d.forwarding {
		b, err := os.ReadFile("/sys/class/net/" + d.hostIf + "/brport/state")
		if err != nil {
			d.t.Fatalf("bridge port %s: %v", d.hostIf, err)
		}
		if d.forwarding = strings.TrimSpace(string(b)) == forwarding; d.forwarding {
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

// Obtain has the client ask the network's DHCP server for a lease,
// requesting the address want, until it obtains one (or ctx ends: the
// test fails), and returns the address it got — want, unless the server
// chose another. It configures nothing in the namespace.
func (d *DHCPClient) Obtain(ctx context.Context, want string) string {
	d.t.Helper()
	d.waitForwarding(ctx)
	for {
		out, err := exec.CommandContext(ctx, d.ipTool, "netns", "exec", d.ns, d.busybox, "udhcpc",
			"-i", d.nsIf, "-n", "-q", "-s", "/bin/true", "-t", "5", "-T", "1", "-r", want).CombinedOutput()
		if m := reObtained.FindSubmatch(out); err == nil && m != nil {
			ip := string(m[1])
			d.obtained = append(d.obtained, ip)
			return ip
		}
		if ctx.Err() != nil {
			d.t.Fatalf("udhcpc for %s never obtained a lease: %v\n%s", d.MAC, err, out)
		}
		d.t.Logf("udhcpc for %s: no lease yet (%v): %s", d.MAC, err, strings.TrimSpace(string(out)))
	}
}

// DefaultNetworkBridge returns the bridge of libvirt's default network at
// uri; a network that does not run stops the test through Require
// (test/setup starts it).
func DefaultNetworkBridge(t testing.TB, uri string) string {
	t.Helper()
	virsh := LookPath(t, "virsh")
	out, err := exec.Command(virsh, "-q", "-c", uri, "net-info", "default").CombinedOutput()
	if err != nil {
		t.Fatalf("virsh net-info default: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^Active:\s+yes$`).Match(out) {
		Require(t, "libvirt's default network", "it does not run (test/setup starts it):\n"+string(out))
	}
	m := regexp.MustCompile(`(?m)^Bridge:\s+(\S+)$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("virsh net-info default names no bridge:\n%s", out)
	}
	return string(m[1])
}
