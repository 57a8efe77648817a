package controller

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// DHCP edits the fixed leases of libvirt networks.
type DHCP interface {
	DHCPHosts(ctx context.Context, network string) ([]virt.DHCPHost, error)
	AddDHCPHost(ctx context.Context, network string, h virt.DHCPHost) error
	RemoveDHCPHost(ctx context.Context, network, mac string) error
}

// LiveDHCP is what a DHCP role may add (*virt.Conn has it): leases
// written to a network's persistent definition only, and brought to the
// running network when a guest that needs them starts. libvirt's live
// update of a DHCP host reloads the network's firewall rules and dnsmasq
// (0.5–1 s, most of an apply); the persistent one is a file write. A
// network that starts later reads its leases from its definition.
type LiveDHCP interface {
	AddDHCPHostConfig(ctx context.Context, network string, h virt.DHCPHost) error
	LiveDHCPHosts(ctx context.Context, network string) ([]virt.DHCPHost, error)
	SyncLiveDHCPHosts(ctx context.Context, network string, macs []string) (int, error)
	RemoveLiveDHCPHost(ctx context.Context, network, mac string) error
}

var _ LiveDHCP = (*virt.Conn)(nil)

// lease is a fixed DHCP host entry of a NIC on its libvirt network.
type lease struct {
	network, mac, ip string
}

func (l lease) String() string { return fmt.Sprintf("%s -> %s on network %s", l.mac, l.ip, l.network) }

// network is the libvirt network of a NIC.
func (c *Controller) network(n model.NIC) string {
	if n.Network != "" {
		return n.Network
	}
	if c.dom.DefaultNetwork != "" {
		return c.dom.DefaultNetwork
	}
	return model.DefaultNetwork
}

// leases are the fixed DHCP leases of an instance, so that the metadata
// service knows a guest's source address before it boots:
//
//   - a NIC with a static IPv4 address (ips) gets its first one;
//   - the other NICs, in order, get the instance's IPv4 addresses
//     (addresses) that no NIC's static address takes, one each, skipping
//     loopback and link-local ones (never a DHCP address on a bridge).
//
// NICs left without an address get none (dnsmasq gives them one from its
// range; the operator must then list it in addresses).
func (c *Controller) leases(in *model.Instance) []lease {
	if in == nil {
		return nil
	}
	static := make([]string, len(in.NICs))
	taken := map[string]bool{}
	for i, n := range in.NICs {
		if ip := firstStaticIPv4(n); ip != "" {
			static[i] = ip
			taken[ip] = true
		}
	}
	var pool []string
	for _, a := range in.Addresses {
		ip, err := netip.ParseAddr(a)
		if err != nil || !ip.Is4() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || taken[ip.String()] {
			continue
		}
		pool = append(pool, ip.String())
	}
	var out []lease
	for i, n := range in.NICs {
		ip := static[i]
		if ip == "" && len(pool) > 0 {
			ip, pool = pool[0], pool[1:]
		}
		if ip == "" || n.MAC == "" {
			continue
		}
		out = append(out, lease{network: c.network(n), mac: strings.ToLower(n.MAC), ip: ip})
	}
	return out
}

func firstStaticIPv4(n model.NIC) string {
	for _, ipc := range n.IPs {
		if p, err := netip.ParsePrefix(ipc.Address); err == nil && p.Addr().Is4() {
			return p.Addr().String()
		}
	}
	return ""
}

// addStaticAddresses appends each NIC's static IPv4 address that the
// instance's addresses lack: the guest will call the metadata service from
// it, so the source-address index must know it before the guest boots.
func addStaticAddresses(in *model.Instance) {
	for _, n := range in.NICs {
		ip := firstStaticIPv4(n)
		if ip != "" && !slices.Contains(in.Addresses, ip) {
			in.Addresses = append(in.Addresses, ip)
		}
	}
}

// syncLeases makes the network's fixed leases go from those of old to
// those of new: leases only old has are removed, leases new has are added
// unless the network already has them; each change registers its undo.
func (c *Controller) syncLeases(ctx context.Context, r *revert.Reverter, old, new *model.Instance) error {
	oldL, newL := c.leases(old), c.leases(new)
	for _, l := range oldL {
		if slices.Contains(newL, l) {
			continue
		}
		if err := c.removeLease(ctx, r, l); err != nil {
			return err
		}
	}
	hosts := map[string][]virt.DHCPHost{}
	added := false // to a persistent definition only
	for _, l := range newL {
		hs, ok := hosts[l.network]
		if !ok {
			var err error
			if hs, err = c.dhcp.DHCPHosts(ctx, l.network); err != nil {
				return fmt.Errorf("DHCP lease %s: %w", l, err)
			}
			hosts[l.network] = hs
		}
		if slices.ContainsFunc(hs, func(h virt.DHCPHost) bool { return h.MAC == l.mac && h.IP == l.ip }) {
			continue
		}
		add := c.dhcp.AddDHCPHost
		if ld, ok := c.dhcp.(LiveDHCP); ok {
			add = ld.AddDHCPHostConfig
			added = true
		}
		if err := add(ctx, l.network, virt.DHCPHost{MAC: l.mac, IP: l.ip}); err != nil {
			return fmt.Errorf("DHCP lease %s: %w", l, err)
		}
		r.Add("remove DHCP lease "+l.String(), func(ctx context.Context) error {
			return c.dhcp.RemoveDHCPHost(ctx, l.network, l.mac)
		})
	}
	if added && new != nil && c.domains != nil {
		// A running guest may ask for its lease at any time: now, not at
		// its next start.
		if st, err := c.domains.State(ctx, new.Name); err == nil && st != virt.StateShutoff {
			return c.liveLeases(ctx, r, new)
		}
	}
	return nil
}

// liveLeases brings the instance's fixed leases from the persistent
// definitions of their networks to the running networks (LiveDHCP), before
// its domain starts; a lease already live costs no update. A lease it
// brings live is registered on r to leave the running network again, so a
// start that fails changes nothing.
func (c *Controller) liveLeases(ctx context.Context, r *revert.Reverter, in *model.Instance) error {
	ld, ok := c.dhcp.(LiveDHCP)
	if !ok {
		return nil
	}
	macs := map[string][]string{}
	var nets []string
	for _, l := range c.leases(in) {
		if _, ok := macs[l.network]; !ok {
			nets = append(nets, l.network)
		}
		macs[l.network] = append(macs[l.network], l.mac)
	}
	for _, n := range nets {
		before, err := ld.LiveDHCPHosts(ctx, n)
		if err != nil {
			return fmt.Errorf("DHCP leases of %s on network %s: %w", in.Name, n, err)
		}
		updates, err := ld.SyncLiveDHCPHosts(ctx, n, macs[n])
		if err != nil {
			return fmt.Errorf("DHCP leases of %s on network %s: %w", in.Name, n, err)
		}
		if updates == 0 {
			continue
		}
		for _, mac := range macs[n] {
			if slices.ContainsFunc(before, func(h virt.DHCPHost) bool { return strings.EqualFold(h.MAC, mac) }) {
				continue
			}
			r.Add("take DHCP lease of "+mac+" off the running network "+n, func(ctx context.Context) error {
				return ld.RemoveLiveDHCPHost(ctx, n, mac)
			})
		}
	}
	return nil
}

// removeLease removes a lease the network has, registering its re-adding.
func (c *Controller) removeLease(ctx context.Context, r *revert.Reverter, l lease) error {
	hs, err := c.dhcp.DHCPHosts(ctx, l.network)
	if err != nil {
		if isNotFound(err) {
			return nil // the network is gone, and its leases with it
		}
		return fmt.Errorf("DHCP lease %s: %w", l, err)
	}
	i := slices.IndexFunc(hs, func(h virt.DHCPHost) bool { return h.MAC == l.mac })
	if i < 0 {
		return nil
	}
	h := hs[i]
	ld, split := c.dhcp.(LiveDHCP)
	wasLive := false
	if split {
		live, err := ld.LiveDHCPHosts(ctx, l.network)
		if err != nil {
			return fmt.Errorf("DHCP lease %s: %w", l, err)
		}
		wasLive = slices.Contains(live, h)
	}
	if err := c.dhcp.RemoveDHCPHost(ctx, l.network, l.mac); err != nil {
		return fmt.Errorf("remove DHCP lease %s: %w", l, err)
	}
	r.Add("restore DHCP lease "+l.String(), func(ctx context.Context) error {
		if !split {
			return c.dhcp.AddDHCPHost(ctx, l.network, h)
		}
		// As it was: in the definition, and live if it was.
		if err := ld.AddDHCPHostConfig(ctx, l.network, h); err != nil {
			return err
		}
		if wasLive {
			_, err := ld.SyncLiveDHCPHosts(ctx, l.network, []string{l.mac})
			return err
		}
		return nil
	})
	return nil
}
