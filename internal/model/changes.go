package model

import (
	"fmt"
	"slices"
)

// CarryOver gives the devices of a re-applied spec that name no address
// the address the hypervisor chose for the same device before (a disk by
// target name and bus, a NIC by MAC), so a redefine does not move them.
func CarryOver(old, in *Instance) {
	for i := range in.Disks {
		d := &in.Disks[i]
		if d.Address != "" {
			continue
		}
		if j := slices.IndexFunc(old.Disks, func(o Disk) bool { return o.Name == d.Name && o.Bus == d.Bus }); j >= 0 {
			d.Address = old.Disks[j].Address
		}
	}
	for i := range in.NICs {
		n := &in.NICs[i]
		if n.Address != "" {
			continue
		}
		if j := slices.IndexFunc(old.NICs, func(o NIC) bool { return o.MAC == n.MAC }); j >= 0 {
			n.Address = old.NICs[j].Address
		}
	}
}

// HardwareChanges lists what differs between the domain of old and that
// of in (devices added, removed or changed in a way the domain XML
// shows); tags, metadata, addresses of the guest and the like are not
// hardware. in must have been through CarryOver.
func HardwareChanges(old, in *Instance) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if old.VCPUs != in.VCPUs {
		add("vcpus %d -> %d", old.VCPUs, in.VCPUs)
	}
	if old.MemoryMiB != in.MemoryMiB {
		add("memory %d MiB -> %d MiB", old.MemoryMiB, in.MemoryMiB)
	}
	for _, d := range in.Disks {
		j := slices.IndexFunc(old.Disks, func(o Disk) bool { return o.Name == d.Name })
		if j < 0 {
			add("disk %s added", d.Name)
			continue
		}
		o := old.Disks[j]
		switch {
		case o.Bus != d.Bus:
			add("disk %s: bus %s -> %s", d.Name, o.Bus, d.Bus)
		case o.Serial != d.Serial:
			add("disk %s: serial %q -> %q", d.Name, o.Serial, d.Serial)
		case d.Address != "" && o.Address != d.Address:
			add("disk %s: address %s -> %s", d.Name, o.Address, d.Address)
		}
	}
	for _, o := range old.Disks {
		if !slices.ContainsFunc(in.Disks, func(d Disk) bool { return d.Name == o.Name }) {
			add("disk %s removed", o.Name)
		}
	}
	for _, n := range in.NICs {
		j := slices.IndexFunc(old.NICs, func(o NIC) bool { return o.MAC == n.MAC })
		if j < 0 {
			add("NIC %s added", n.MAC)
			continue
		}
		o := old.NICs[j]
		switch {
		case o.Network != n.Network:
			add("NIC %s: network %q -> %q", n.MAC, o.Network, n.Network)
		case o.MTU != n.MTU:
			add("NIC %s: mtu %d -> %d", n.MAC, o.MTU, n.MTU)
		case n.Address != "" && o.Address != n.Address:
			add("NIC %s: address %s -> %s", n.MAC, o.Address, n.Address)
		}
	}
	for _, o := range old.NICs {
		if !slices.ContainsFunc(in.NICs, func(n NIC) bool { return n.MAC == o.MAC }) {
			add("NIC %s removed", o.MAC)
		}
	}
	shareKey := func(s Share) string { return s.ShareID + "|" + s.EffectiveTag() + "|" + s.Source }
	if !slices.Equal(sortedKeys(old.Shares, shareKey), sortedKeys(in.Shares, shareKey)) {
		add("shares changed")
	}
	if o, n := old.WantsConfigDrive(), in.WantsConfigDrive(); o != n {
		add("config_drive %t -> %t", o, n)
	}
	pciKey := func(p PCIDevice) string { return p.Address }
	if !slices.Equal(sortedKeys(old.PCIDevices, pciKey), sortedKeys(in.PCIDevices, pciKey)) {
		add("pci_devices changed")
	}
	return out
}

// SizeChanges lists disks whose size a re-applied spec changes: hostctl
// does not resize images.
func SizeChanges(old, in *Instance) []FieldError {
	var out []FieldError
	for i, d := range in.Disks {
		j := slices.IndexFunc(old.Disks, func(o Disk) bool { return o.Name == d.Name })
		if j >= 0 && old.Disks[j].Size != d.Size {
			out = append(out, FieldError{Field: fmt.Sprintf("disks[%d].size", i), Value: d.Size,
				Rule: fmt.Sprintf("disk %s exists with size %q; hostctl does not resize disks (detach it and attach a new one)", d.Name, old.Disks[j].Size)})
		}
	}
	return out
}

func sortedKeys[T any](s []T, f func(T) string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = f(v)
	}
	slices.Sort(out)
	return out
}
