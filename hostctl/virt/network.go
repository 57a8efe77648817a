package virt

import (
	"context"
	"encoding/xml"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/vmeta/vmeta/internal/model"
)

// DHCPHost is a fixed DHCP lease of a libvirt network (<ip><dhcp><host>):
// the guest with MAC always gets IP, so its source address is known before
// it boots.
type DHCPHost struct {
	MAC string
	IP  string
	// Name is an optional hostname dnsmasq hands out with the lease.
	Name string
}

func (h DHCPHost) xml() (string, error) {
	b, err := xml.Marshal(struct {
		XMLName xml.Name `xml:"host"`
		MAC     string   `xml:"mac,attr"`
		Name    string   `xml:"name,attr,omitempty"`
		IP      string   `xml:"ip,attr"`
	}{MAC: h.MAC, Name: h.Name, IP: h.IP})
	return string(b), err
}

type networkXML struct {
	Name string `xml:"name"`
	IPs  []struct {
		Family string `xml:"family,attr"`
		DHCP   *struct {
			Hosts []struct {
				MAC  string `xml:"mac,attr"`
				Name string `xml:"name,attr"`
				IP   string `xml:"ip,attr"`
			} `xml:"host"`
		} `xml:"dhcp"`
	} `xml:"ip"`
}

// DHCPHosts lists the fixed DHCP leases of network (from its persistent
// definition).
func (c *Conn) DHCPHosts(ctx context.Context, network string) ([]DHCPHost, error) {
	var hosts []DHCPHost
	err := c.call(ctx, "list DHCP hosts of", "network "+network, func(l *libvirt.Libvirt) error {
		n, err := l.NetworkLookupByName(network)
		if err != nil {
			return err
		}
		hosts, err = dhcpHosts(l, n)
		return err
	})
	return hosts, err
}

func dhcpHosts(l *libvirt.Libvirt, n libvirt.Network) ([]DHCPHost, error) {
	return dhcpHostsOf(l, n, uint32(libvirt.NetworkXMLInactive))
}

// dhcpHostsOf lists the fixed leases of the definition flags selects: the
// persistent one (NetworkXMLInactive) or the running one (0).
func dhcpHostsOf(l *libvirt.Libvirt, n libvirt.Network, flags uint32) ([]DHCPHost, error) {
	s, err := l.NetworkGetXMLDesc(n, flags)
	if err != nil {
		return nil, err
	}
	var nx networkXML
	if err := xml.Unmarshal([]byte(s), &nx); err != nil {
		return nil, fmt.Errorf("parse network XML: %w", err)
	}
	var hosts []DHCPHost
	for _, ip := range nx.IPs {
		if ip.DHCP == nil {
			continue
		}
		for _, h := range ip.DHCP.Hosts {
			hosts = append(hosts, DHCPHost{MAC: strings.ToLower(h.MAC), IP: h.IP, Name: h.Name})
		}
	}
	return hosts, nil
}

// LiveDHCPHosts lists the fixed DHCP leases of the running network (none
// when it does not run).
func (c *Conn) LiveDHCPHosts(ctx context.Context, network string) ([]DHCPHost, error) {
	var hosts []DHCPHost
	err := c.onRunningNetwork(ctx, "list live DHCP hosts of", "network "+network, network, func(l *libvirt.Libvirt, n libvirt.Network) error {
		var err error
		hosts, err = dhcpHostsOf(l, n, 0)
		return err
	})
	return hosts, err
}

// onRunningNetwork runs fn on network when it runs (libvirt's call as c.call
// names it); a network that does not run is left alone, no error.
func (c *Conn) onRunningNetwork(ctx context.Context, verb, what, network string, fn func(*libvirt.Libvirt, libvirt.Network) error) error {
	return c.call(ctx, verb, what, func(l *libvirt.Libvirt) error {
		n, err := l.NetworkLookupByName(network)
		if err != nil {
			return err
		}
		active, err := l.NetworkIsActive(n)
		if err != nil || active != 1 {
			return err
		}
		return fn(l, n)
	})
}

// networkUpdateFlags apply a change to the definition, and to the running
// network when it runs (libvirt refuses "live" on an inactive one).
func networkUpdateFlags(l *libvirt.Libvirt, n libvirt.Network) (libvirt.NetworkUpdateFlags, error) {
	flags := libvirt.NetworkUpdateAffectConfig
	active, err := l.NetworkIsActive(n)
	if err != nil {
		return 0, err
	}
	if active == 1 {
		flags |= libvirt.NetworkUpdateAffectLive
	}
	return flags, nil
}

// AddDHCPHost adds a fixed lease MAC -> IP to network, in its definition
// and (when it runs) live. Adding the same lease again is a no-op; a lease
// for the same MAC or IP with other values is ErrConflict.
func (c *Conn) AddDHCPHost(ctx context.Context, network string, h DHCPHost) error {
	return c.addDHCPHost(ctx, network, h, true)
}

// AddDHCPHostConfig adds a fixed lease to network's persistent definition
// only. A live update of a DHCP host makes libvirt reload the network's
// firewall rules and dnsmasq (0.5–1 s); the persistent one is a file
// write. SyncLiveDHCPHosts brings the lease to the running network before
// a guest that needs it starts; a network started later reads it from the
// definition. Same rules as AddDHCPHost otherwise.
func (c *Conn) AddDHCPHostConfig(ctx context.Context, network string, h DHCPHost) error {
	return c.addDHCPHost(ctx, network, h, false)
}

func (c *Conn) addDHCPHost(ctx context.Context, network string, h DHCPHost, live bool) error {
	h.MAC = strings.ToLower(h.MAC)
	what := fmt.Sprintf("DHCP host %s -> %s to network %s", h.MAC, h.IP, network)
	if !model.IsMAC(h.MAC) {
		return fmt.Errorf("add %s: %q is not a MAC address", what, h.MAC)
	}
	if _, err := netip.ParseAddr(h.IP); err != nil {
		return fmt.Errorf("add %s: %w", what, err)
	}
	return c.call(ctx, "add", what, func(l *libvirt.Libvirt) error {
		n, err := l.NetworkLookupByName(network)
		if err != nil {
			return err
		}
		hosts, err := dhcpHosts(l, n)
		if err != nil {
			return err
		}
		for _, e := range hosts {
			switch {
			case e.MAC == h.MAC && e.IP == h.IP && e.Name == h.Name:
				return nil
			case e.MAC == h.MAC || e.IP == h.IP:
				return fmt.Errorf("%w: the network has host %s -> %s", ErrConflict, e.MAC, e.IP)
			}
		}
		x, err := h.xml()
		if err != nil {
			return err
		}
		flags := libvirt.NetworkUpdateAffectConfig
		if live {
			if flags, err = networkUpdateFlags(l, n); err != nil {
				return err
			}
		}
		return c.updateDHCPHost(l, n, libvirt.NetworkUpdateCommandAddLast, x, flags)
	})
}

// RemoveDHCPHost removes the fixed lease of mac from network: from its
// definition and from the running network, each where it has one (a lease
// added by AddDHCPHostConfig may not be live yet); no lease for mac is not
// an error.
func (c *Conn) RemoveDHCPHost(ctx context.Context, network, mac string) error {
	mac = strings.ToLower(mac)
	return c.call(ctx, "remove", fmt.Sprintf("DHCP host %s from network %s", mac, network), func(l *libvirt.Libvirt) error {
		n, err := l.NetworkLookupByName(network)
		if err != nil {
			return err
		}
		cfg, err := dhcpHosts(l, n)
		if err != nil {
			return err
		}
		active, err := l.NetworkIsActive(n)
		if err != nil {
			return err
		}
		var live []DHCPHost
		if active == 1 {
			if live, err = dhcpHostsOf(l, n, 0); err != nil {
				return err
			}
		}
		ci := slices.IndexFunc(cfg, func(h DHCPHost) bool { return h.MAC == mac })
		li := slices.IndexFunc(live, func(h DHCPHost) bool { return h.MAC == mac })
		del := func(h DHCPHost, flags libvirt.NetworkUpdateFlags) error {
			x, err := h.xml()
			if err != nil {
				return err
			}
			return c.updateDHCPHost(l, n, libvirt.NetworkUpdateCommandDelete, x, flags)
		}
		switch {
		case ci >= 0 && li >= 0 && cfg[ci] == live[li]:
			return del(cfg[ci], libvirt.NetworkUpdateAffectConfig|libvirt.NetworkUpdateAffectLive)
		case ci >= 0 && li >= 0:
			if err := del(cfg[ci], libvirt.NetworkUpdateAffectConfig); err != nil {
				return err
			}
			return del(live[li], libvirt.NetworkUpdateAffectLive)
		case ci >= 0:
			return del(cfg[ci], libvirt.NetworkUpdateAffectConfig)
		case li >= 0:
			return del(live[li], libvirt.NetworkUpdateAffectLive)
		}
		return nil
	})
}

// RemoveLiveDHCPHost removes the running network's fixed lease of mac,
// leaving its definition as it is: the undo of a SyncLiveDHCPHosts that
// brought a lease live for a start that then failed. A network that does
// not run, or runs without that lease, is left alone.
func (c *Conn) RemoveLiveDHCPHost(ctx context.Context, network, mac string) error {
	return c.onRunningNetwork(ctx, "remove the live DHCP host of", "network "+network, network, func(l *libvirt.Libvirt, n libvirt.Network) error {
		live, err := dhcpHostsOf(l, n, 0)
		if err != nil {
			return err
		}
		mac = strings.ToLower(mac)
		li := slices.IndexFunc(live, func(h DHCPHost) bool { return h.MAC == mac })
		if li < 0 {
			return nil
		}
		x, err := live[li].xml()
		if err != nil {
			return err
		}
		return c.updateDHCPHost(l, n, libvirt.NetworkUpdateCommandDelete, x, libvirt.NetworkUpdateAffectLive)
	})
}

// SyncLiveDHCPHosts makes the running network's fixed leases of macs what
// its definition has: a lease only the definition has is added live, one
// that differs is replaced, one the definition lost is removed. It returns
// the number of live updates made (0 when they already agree, or when the
// network does not run: it reads its definition when it starts).
func (c *Conn) SyncLiveDHCPHosts(ctx context.Context, network string, macs []string) (int, error) {
	updates := 0
	err := c.onRunningNetwork(ctx, "sync live DHCP hosts of", "network "+network, network, func(l *libvirt.Libvirt, n libvirt.Network) error {
		cfg, err := dhcpHosts(l, n)
		if err != nil {
			return err
		}
		live, err := dhcpHostsOf(l, n, 0)
		if err != nil {
			return err
		}
		update := func(cmd libvirt.NetworkUpdateCommand, h DHCPHost) error {
			x, err := h.xml()
			if err != nil {
				return err
			}
			updates++
			return c.updateDHCPHost(l, n, cmd, x, libvirt.NetworkUpdateAffectLive)
		}
		for _, mac := range macs {
			mac = strings.ToLower(mac)
			ci := slices.IndexFunc(cfg, func(h DHCPHost) bool { return h.MAC == mac })
			li := slices.IndexFunc(live, func(h DHCPHost) bool { return h.MAC == mac })
			if ci >= 0 && li >= 0 && cfg[ci] == live[li] || ci < 0 && li < 0 {
				continue
			}
			if li >= 0 {
				if err := update(libvirt.NetworkUpdateCommandDelete, live[li]); err != nil {
					return err
				}
			}
			if ci >= 0 {
				if err := update(libvirt.NetworkUpdateCommandAddLast, cfg[ci]); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return updates, err
}

// updateDHCPHost applies cmd to a DHCP host entry of network n —
// go-libvirt's NetworkUpdateCompat, which asks libvirtd on every call
// whether it takes NetworkUpdate's arguments in the corrected order
// (libvirt commit b0f78d62): the answer is asked once per connection
// (an RPC less per update).
func (c *Conn) updateDHCPHost(l *libvirt.Libvirt, n libvirt.Network, cmd libvirt.NetworkUpdateCommand, x string, flags libvirt.NetworkUpdateFlags) error {
	// This is defined in libvirt/src/libvirt_internal.h, not in go-libvirt.
	const virDrvFeatureNetworkUpdateHasCorrectOrder = 16
	c.mu.Lock()
	correct, known := c.updateOrder.correct, c.updateOrder.of == l
	c.mu.Unlock()
	if !known {
		has, err := l.ConnectSupportsFeature(virDrvFeatureNetworkUpdateHasCorrectOrder)
		if err != nil {
			return fmt.Errorf("failed to confirm argument order for NetworkUpdate: %w", err)
		}
		correct = has != 0
		c.mu.Lock()
		c.updateOrder.of, c.updateOrder.correct = l, correct
		c.mu.Unlock()
	}
	section := libvirt.NetworkSectionIPDhcpHost
	if correct {
		return l.NetworkUpdate(n, uint32(cmd), uint32(section), -1, x, flags)
	}
	return l.NetworkUpdate(n, uint32(section), uint32(cmd), -1, x, flags)
}
