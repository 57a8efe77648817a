package virt

import (
	"context"
	"encoding/xml"
	"fmt"
	"net/netip"
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
	s, err := l.NetworkGetXMLDesc(n, uint32(libvirt.NetworkXMLInactive))
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
		flags, err := networkUpdateFlags(l, n)
		if err != nil {
			return err
		}
		return l.NetworkUpdateCompat(n, libvirt.NetworkUpdateCommandAddLast, libvirt.NetworkSectionIPDhcpHost, -1, x, flags)
	})
}

// RemoveDHCPHost removes the fixed lease of mac from network (definition
// and live); no lease for mac is not an error.
func (c *Conn) RemoveDHCPHost(ctx context.Context, network, mac string) error {
	mac = strings.ToLower(mac)
	return c.call(ctx, "remove", fmt.Sprintf("DHCP host %s from network %s", mac, network), func(l *libvirt.Libvirt) error {
		n, err := l.NetworkLookupByName(network)
		if err != nil {
			return err
		}
		hosts, err := dhcpHosts(l, n)
		if err != nil {
			return err
		}
		for _, e := range hosts {
			if e.MAC != mac {
				continue
			}
			x, err := e.xml()
			if err != nil {
				return err
			}
			flags, err := networkUpdateFlags(l, n)
			if err != nil {
				return err
			}
			return l.NetworkUpdateCompat(n, libvirt.NetworkUpdateCommandDelete, libvirt.NetworkSectionIPDhcpHost, -1, x, flags)
		}
		return nil
	})
}
