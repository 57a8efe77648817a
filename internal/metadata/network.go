package metadata

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vmeta/vmeta/internal/model"
)

// networkDataDoc is network_data.json (nova/virt/netutils.py
// get_network_metadata): all three lists are always present, except that an
// instance without NICs gets {}.
type networkDataDoc struct {
	Links    []link    `json:"links"`
	Networks []network `json:"networks"`
	Services []service `json:"services"`
}

type link struct {
	ID                 string `json:"id"`
	VIFID              string `json:"vif_id"`
	Type               string `json:"type"`
	MTU                *int   `json:"mtu"`
	EthernetMACAddress string `json:"ethernet_mac_address"`
}

type network struct {
	ID        string   `json:"id"`
	Type      string   `json:"type"`
	Link      string   `json:"link"`
	IPAddress string   `json:"ip_address,omitempty"`
	Netmask   string   `json:"netmask,omitempty"`
	Routes    *[]route `json:"routes,omitempty"`
	NetworkID string   `json:"network_id"`
	// Services is set (possibly empty) on static networks only.
	Services *[]service `json:"services,omitempty"`
}

type route struct {
	Network string `json:"network"`
	Netmask string `json:"netmask"`
	Gateway string `json:"gateway"`
}

type service struct {
	Type    string `json:"type"`
	Address string `json:"address"`
}

func networkData(in *model.Instance) any {
	if len(in.NICs) == 0 {
		return struct{}{}
	}
	doc := networkDataDoc{Links: []link{}, Networks: []network{}, Services: []service{}}
	seenDNS := map[string]bool{}
	netIdx := 0
	for i, n := range in.NICs {
		l := link{
			ID:                 fmt.Sprintf("interface%d", i),
			VIFID:              stableUUID(in.UUID, "vif\x00"+n.MAC),
			Type:               "phy",
			EthernetMACAddress: n.MAC,
		}
		networkID := n.Network
		if networkID == "" {
			networkID = stableUUID(in.UUID, "network\x00"+n.MAC)
		}
		// Nova sets mtu to null when a DHCP server serves the network (the
		// guest learns the MTU from DHCP).
		if len(n.IPs) > 0 && n.MTU > 0 {
			mtu := n.MTU
			l.MTU = &mtu
		}
		doc.Links = append(doc.Links, l)
		if len(n.IPs) == 0 {
			doc.Networks = append(doc.Networks, network{
				ID: fmt.Sprintf("network%d", netIdx), Type: "ipv4_dhcp", Link: l.ID, NetworkID: networkID,
			})
			netIdx++
			continue
		}
		for _, ipc := range n.IPs {
			p, err := netip.ParsePrefix(ipc.Address)
			if err != nil {
				continue // model.Validate refuses such specs
			}
			nw := network{
				ID:        fmt.Sprintf("network%d", netIdx),
				Type:      "ipv4",
				Link:      l.ID,
				IPAddress: p.Addr().String(),
				Netmask:   netmask(p),
				Routes:    &[]route{},
				NetworkID: networkID,
				Services:  &[]service{},
			}
			if p.Addr().Is6() {
				nw.Type = "ipv6"
			}
			if ipc.Gateway != "" {
				def := route{Network: "0.0.0.0", Netmask: "0.0.0.0", Gateway: ipc.Gateway}
				if p.Addr().Is6() {
					def = route{Network: "::", Netmask: "::", Gateway: ipc.Gateway}
				}
				*nw.Routes = append(*nw.Routes, def)
			}
			for _, d := range ipc.DNS {
				*nw.Services = append(*nw.Services, service{Type: "dns", Address: d})
				if !seenDNS[d] {
					seenDNS[d] = true
					doc.Services = append(doc.Services, service{Type: "dns", Address: d})
				}
			}
			doc.Networks = append(doc.Networks, nw)
			netIdx++
		}
	}
	return doc
}

// netmask renders a prefix length as a dotted (IPv4) or colon (IPv6) mask,
// as Nova does.
func netmask(p netip.Prefix) string {
	bits := 32
	if p.Addr().Is6() {
		bits = 128
	}
	return net.IP(net.CIDRMask(p.Bits(), bits)).String()
}
