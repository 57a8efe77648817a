package virt

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/model"
)

// The dynamic side of a libvirt network's DHCP server (dnsmasq): the
// leases it has handed out, and the release of one.
//
// dnsmasq does not give a host its configured address (a DHCPHost) while
// that address is still leased to another MAC — a guest deleted less
// than a lease time (an hour by default) ago, or a dynamic client: it
// logs "not using configured address … because it is leased to …" and
// hands out a dynamic address instead, so the guest lives at an address
// its metadata does not name. ActiveLeases lets hostctl see that;
// ReleaseLease frees the address of a deleted guest at once, as
// OpenStack Neutron's dnsmasq driver does for a deleted port.

// Lease is a lease a network's DHCP server handed out.
type Lease struct {
	MAC string // lower-case
	IP  string
	// Expiry is when the lease ends (zero: it does not).
	Expiry time.Time
	// Hostname is the name the client sent ("" without one).
	Hostname string
}

// ActiveLeases lists the leases network's DHCP server holds now (libvirt
// leaves out expired ones); none when the network does not run.
func (c *Conn) ActiveLeases(ctx context.Context, network string) ([]Lease, error) {
	var out []Lease
	err := c.onRunningNetwork(ctx, "list DHCP leases of", "network "+network, network, func(l *libvirt.Libvirt, n libvirt.Network) error {
		leases, _, err := l.NetworkGetDhcpLeases(n, nil, 1, 0)
		if err != nil {
			return err
		}
		for _, le := range leases {
			out = append(out, toLease(le))
		}
		return nil
	})
	return out, err
}

func toLease(le libvirt.NetworkDhcpLease) Lease {
	out := Lease{IP: le.Ipaddr}
	if len(le.Mac) > 0 {
		out.MAC = strings.ToLower(le.Mac[0])
	}
	if len(le.Hostname) > 0 {
		out.Hostname = le.Hostname[0]
	}
	if le.Expirytime > 0 {
		out.Expiry = time.Unix(le.Expirytime, 0).UTC()
	}
	return out
}

// DHCPReleaseTool is the program ReleaseLease runs: dnsmasq's own, in
// Debian's package DHCPReleasePackage.
const (
	DHCPReleaseTool    = "dhcp_release"
	DHCPReleasePackage = "dnsmasq-utils"
)

// ErrNoDHCPRelease is wrapped by ReleaseLease's error when
// DHCPReleaseTool is not installed.
var ErrNoDHCPRelease = errkind.New(errkind.Unavailable, DHCPReleaseTool+" not found (install the "+DHCPReleasePackage+" package)")

// ReleaseLease makes network's DHCP server drop its lease of ip held by
// mac, so the address can be handed out again at once (to the guest it is
// configured for): it runs `dhcp_release BRIDGE IP MAC`, which sends the
// server a DHCPRELEASE on the network's bridge as if from the client.
// dnsmasq ignores a release that names no lease of its (the address not
// leased, or leased to another MAC), so that is no error; neither is a
// network that does not run. It needs root (the bridge is bound to) and
// libvirtd on this machine; ip is an IPv4 address.
func (c *Conn) ReleaseLease(ctx context.Context, network, ip, mac string) error {
	what := fmt.Sprintf("DHCP lease of %s by %s on network %s", ip, mac, network)
	args, err := releaseArgs("", ip, mac)
	if err != nil {
		return fmt.Errorf("release %s: %w", what, err)
	}
	if !c.local() {
		return fmt.Errorf("release %s: libvirtd at %s is not on this machine, and %s must run where the network's bridge is", what, c.where, DHCPReleaseTool)
	}
	tool, err := exec.LookPath(DHCPReleaseTool)
	if err != nil {
		return fmt.Errorf("release %s: %w: %w", what, ErrNoDHCPRelease, err)
	}
	var bridge string
	err = c.onRunningNetwork(ctx, "release", what, network, func(l *libvirt.Libvirt, n libvirt.Network) error {
		// Where its DHCP server listens (libvirt refuses a network
		// without a bridge of its own: its DHCP, if any, is not libvirt's).
		bridge, err = l.NetworkGetBridgeName(n)
		return err
	})
	if err != nil || bridge == "" {
		return err
	}
	args[0] = bridge
	out, err := exec.CommandContext(ctx, tool, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("release %s: %s %s: %w: %s", what, DHCPReleaseTool, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// releaseArgs are dhcp_release's arguments: bridge, ip, mac (lower-case);
// ip must be IPv4 (dhcp_release6 is another protocol's) and mac a MAC.
func releaseArgs(bridge, ip, mac string) ([]string, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil || !a.Is4() {
		return nil, fmt.Errorf("address %q: not an IPv4 address", ip)
	}
	mac = strings.ToLower(mac)
	if !model.IsMAC(mac) {
		return nil, fmt.Errorf("MAC %q: not a MAC address", mac)
	}
	return []string{bridge, a.String(), mac}, nil
}

// local reports whether libvirtd runs on this machine (its unix socket,
// or a URI without a remote host).
func (c *Conn) local() bool {
	switch c.uri.Hostname() {
	case "", "localhost", "127.0.0.1", "::1":
		return true
	}
	return false
}
