package model

import (
	"fmt"
	"net"
)

// PCIAddress is the address of a PCI function, domain:bus:slot.function,
// written "0000:00:03.0": the form of Nova's device metadata, of Linux's
// sysfs directory names and (as separate hex attributes) of libvirt's
// <address type='pci'>.
type PCIAddress struct {
	Domain   uint16
	Bus      uint8
	Slot     uint8 // at most MaxPCISlot on a real bus
	Function uint8 // 0-7
}

// MaxPCISlot is the highest slot (device) number of a PCI bus: five bits.
// The written form allows two hex digits; libvirt and QEMU refuse a slot
// above it.
const MaxPCISlot = 0x1f

// ParsePCIAddress parses the written form dddd:bb:ss.f: four, two and two
// lower-case hex digits and a function 0-7, as sysfs and Nova write it
// (Normalize lowers spec addresses first). It does not check the slot
// against MaxPCISlot.
func ParsePCIAddress(s string) (PCIAddress, error) {
	if len(s) != len("dddd:bb:ss.f") || s[4] != ':' || s[7] != ':' || s[10] != '.' {
		return PCIAddress{}, fmt.Errorf("%q is not a PCI address dddd:bb:ss.f", s)
	}
	var v [3]uint64
	for i, part := range []string{s[0:4], s[5:7], s[8:10]} {
		n, ok := lowerHex(part)
		if !ok {
			return PCIAddress{}, fmt.Errorf("%q is not a PCI address dddd:bb:ss.f (lower-case hex)", s)
		}
		v[i] = n
	}
	if s[11] < '0' || s[11] > '7' {
		return PCIAddress{}, fmt.Errorf("%q is not a PCI address dddd:bb:ss.f (function 0-7)", s)
	}
	return PCIAddress{Domain: uint16(v[0]), Bus: uint8(v[1]), Slot: uint8(v[2]), Function: s[11] - '0'}, nil
}

// IsPCIAddress reports whether s is a PCI address in the written form
// ParsePCIAddress accepts.
func IsPCIAddress(s string) bool {
	_, err := ParsePCIAddress(s)
	return err == nil
}

// String writes the address as dddd:bb:ss.f, lower-case hex.
func (a PCIAddress) String() string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", a.Domain, a.Bus, a.Slot, a.Function)
}

// lowerHex parses a non-empty string of lower-case hex digits.
func lowerHex(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | uint64(c-'a'+10)
		default:
			return 0, false
		}
	}
	return n, true
}

// ParseMAC parses a MAC address in the form specs, libvirt and sysfs use:
// six colon-separated octets of two lower-case hex digits each
// ("52:54:00:12:34:56"; Normalize lowers spec MACs first).
func ParseMAC(s string) (net.HardwareAddr, error) {
	if len(s) != len("aa:bb:cc:dd:ee:ff") {
		return nil, fmt.Errorf("%q is not a MAC address aa:bb:cc:dd:ee:ff", s)
	}
	mac := make(net.HardwareAddr, 6)
	for i := range mac {
		if i > 0 && s[3*i-1] != ':' {
			return nil, fmt.Errorf("%q is not a MAC address aa:bb:cc:dd:ee:ff", s)
		}
		n, ok := lowerHex(s[3*i : 3*i+2])
		if !ok {
			return nil, fmt.Errorf("%q is not a MAC address aa:bb:cc:dd:ee:ff (lower-case hex)", s)
		}
		mac[i] = byte(n)
	}
	return mac, nil
}

// IsMAC reports whether s is a MAC address in the form ParseMAC accepts.
func IsMAC(s string) bool {
	_, err := ParseMAC(s)
	return err == nil
}

// CheckDiskSize checks a disk size as qemu-img takes it and the spec
// schema allows it: a byte count with an optional K, M, G or T suffix
// ("10G"), at most MaxDiskSize (ParseDiskSize, bounds.go).
func CheckDiskSize(size string) error {
	_, err := ParseDiskSize(size)
	return err
}

// DefaultNetwork is the libvirt network of a NIC whose spec names none
// (unless hostctl serve --libvirt-network says otherwise): the NAT network
// libvirt creates on installation.
const DefaultNetwork = "default"
