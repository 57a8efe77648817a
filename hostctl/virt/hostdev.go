package virt

import (
	"encoding/xml"
	"fmt"
)

// HostdevXML is the managed PCI <hostdev> of host device addr
// (dddd:bb:ss.f), as attach and detach calls take it; guest, when not ""
// or "none", is the guest-side address it asks for.
func HostdevXML(addr, guest string) ([]byte, error) {
	a, err := pciAddress(addr)
	if err != nil {
		return nil, fmt.Errorf("hostdev: %w", err)
	}
	hd := hostdevXML{Mode: "subsystem", Type: "pci", Managed: "yes",
		Source: hostdevSourceXML{Address: hostAddressXML{Domain: a.Domain, Bus: a.Bus, Slot: a.Slot, Function: a.Function}}}
	if guest != "" && guest != "none" {
		if hd.Address, err = pciAddress(guest); err != nil {
			return nil, fmt.Errorf("hostdev %s: guest address: %w", addr, err)
		}
	}
	return xml.Marshal(hd)
}
