// Package match decides which of the guest's devices each entry of the
// device metadata describes. It never guesses: every identifier the
// metadata gives narrows the candidates, and an entry is matched only
// when the identifiers together single out exactly one device and none of
// them contradicts it. Anything else is reported: nothing matches
// (Unmatched), several devices fit (Ambiguous), or identifiers point at
// different devices or at a device that visibly differs (Conflict).
//
// The rules, per device type:
//
// NICs: by MAC (case-insensitive) among interfaces backed by a device
// (never lo, bridges, bonds). A PCI address (bus "pci") narrows further:
// two NICs may share a MAC, as in the specification's own example, and are
// then told apart by address. (devname, which only containers set, is not
// used: wire.Device does not carry it.)
//
// Disks (whole disks, never loop/dm/ram devices):
//
//   - bus "pci", address dddd:bb:ss.f: the last PCI function on the
//     disk's sysfs path is that address (virtio-blk: .../0000:00:07.0/
//     virtio2/block/vda; behind a root port the path nests,
//     .../0000:00:02.1/0000:02:00.0/..., and the last function counts).
//   - serial: the disk's serial equals the metadata serial, or is its
//     prefix cut where the transport cuts serials: virtio-blk and ATA at
//     20 bytes (QEMU truncates; Nova's 36-character volume UUIDs arrive
//     as their first 20), SCSI at 36 (VPD page 0x80 of scsi-hd).
//   - bus "scsi", address controller:bus:target:unit (hex, as libvirt's
//     drive address): a disk on a SCSI HBA whose channel:target:lun is
//     bus:target:unit, or a disk on ATA (SATA) port unit when bus and
//     target are 0 (libvirt reports SATA disks on the scsi bus; Linux
//     gives every ATA port its own SCSI host). The controller index is
//     libvirt's and has no counterpart in the guest (its SCSI host
//     numbers are its own), so several HBAs with a disk at the same
//     channel:target:lun make the entry ambiguous unless the serial
//     decides.
//   - bus "ide", address bus:unit: an ATA disk on port bus+1's link
//     device unit (PATA master/slave; not verified in a guest).
//   - path (containers, Xen): the device node.
//
// Shares: present when the kernel lists the tag (/sys/fs/virtiofs,
// Linux 6.9 and later); unknown on older kernels, where only a mount
// attempt tells.
package match

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/vmeta/vmeta/guest/sysfs"
	"github.com/vmeta/vmeta/internal/metadata/wire"
)

// Status is the outcome for one metadata entry.
type Status string

// Outcomes.
const (
	Matched   Status = "matched"
	Unmatched Status = "unmatched"
	Ambiguous Status = "ambiguous"
	Conflict  Status = "conflict"
	// Present and Absent are a share's outcomes when the kernel lists
	// virtiofs tags; Unknown when it does not.
	Present Status = "present"
	Absent  Status = "absent"
	Unknown Status = "unknown"
)

// Result is the outcome for one entry of the devices list.
type Result struct {
	// Index is the entry's position in the devices list.
	Index  int
	Device wire.Device
	Status Status
	// Disk or NIC is the matched device (Status Matched).
	Disk *sysfs.Disk
	NIC  *sysfs.NIC
	// By lists the identifiers that decided, e.g. "pci 0000:00:07.0",
	// "serial disk-vol-1", "mac 52:54:00:12:34:56".
	By []string
	// Reason explains a status other than Matched and Present.
	Reason string
	// Notes are remarks about a match (an identifier the guest cannot
	// see).
	Notes []string
}

// OK reports whether the entry was matched (or a share is present or may
// be).
func (r *Result) OK() bool {
	switch r.Status {
	case Matched, Present, Unknown:
		return true
	}
	return false
}

// Devices matches every entry of devs against inv. Entries of types other
// than nic, disk and share must have been dropped before (the source
// reports them).
func Devices(devs []wire.Device, inv *sysfs.Inventory) []Result {
	out := make([]Result, len(devs))
	for i, d := range devs {
		r := Result{Index: i, Device: d}
		switch d.Type {
		case "nic":
			matchNIC(&r, inv)
		case "disk":
			matchDisk(&r, inv)
		case "share":
			matchShare(&r, inv)
		default:
			r.Status, r.Reason = Unmatched, fmt.Sprintf("unknown device type %q", d.Type)
		}
		out[i] = r
	}
	return out
}

// criterion is one identifier and the candidates (indexes) it allows.
type criterion struct {
	what  string // "serial disk-vol-1"
	cands []int
	// contradicts reports whether candidate i visibly has another value
	// for this identifier (nil: the guest cannot tell).
	contradicts func(i int) bool
}

// decide intersects the criteria and sets r's outcome; name(i) names a
// candidate. It returns the chosen index or -1.
func decide(r *Result, kind string, crits []criterion, name func(int) string) int {
	if len(crits) == 0 {
		r.Status, r.Reason = Unmatched, "the metadata gives no address, serial or path to match on"
		return -1
	}
	var seen, unseen []criterion
	for _, c := range crits {
		if len(c.cands) > 0 {
			seen = append(seen, c)
		} else {
			unseen = append(unseen, c)
		}
	}
	if len(seen) == 0 {
		whats := make([]string, len(crits))
		for i, c := range crits {
			whats[i] = c.what
		}
		r.Status, r.Reason = Unmatched, fmt.Sprintf("no %s with %s", kind, strings.Join(whats, ", "))
		return -1
	}
	inter := slices.Clone(seen[0].cands)
	for _, c := range seen[1:] {
		inter = slices.DeleteFunc(inter, func(i int) bool { return !slices.Contains(c.cands, i) })
	}
	switch {
	case len(inter) == 0:
		parts := make([]string, len(seen))
		for i, c := range seen {
			parts[i] = fmt.Sprintf("%s is %s", c.what, names(c.cands, name))
		}
		r.Status, r.Reason = Conflict, "the identifiers point at different devices: "+strings.Join(parts, "; ")
		return -1
	case len(inter) > 1:
		whats := make([]string, len(seen))
		for i, c := range seen {
			whats[i] = c.what
		}
		r.Status, r.Reason = Ambiguous, fmt.Sprintf("%d %ss fit %s: %s", len(inter), kind, strings.Join(whats, ", "), names(inter, name))
		return -1
	}
	chosen := inter[0]
	for _, c := range unseen {
		if c.contradicts != nil && c.contradicts(chosen) {
			r.Status, r.Reason = Conflict, fmt.Sprintf("%s is %s, which does not have %s", seen[0].what, name(chosen), c.what)
			return -1
		}
		r.Notes = append(r.Notes, fmt.Sprintf("%s: not visible in the guest, matched without it", c.what))
	}
	for _, c := range seen {
		r.By = append(r.By, c.what)
	}
	r.Status = Matched
	return chosen
}

func names(idx []int, name func(int) string) string {
	s := make([]string, len(idx))
	for i, j := range idx {
		s[i] = name(j)
	}
	return strings.Join(s, ", ")
}

func hasAddress(a string) bool { return a != "" && a != "none" }

func matchNIC(r *Result, inv *sysfs.Inventory) {
	d := r.Device
	nics := inv.NICs
	name := func(i int) string { return nics[i].Name }
	var crits []criterion
	mac := strings.ToLower(d.MAC)
	crits = append(crits, criterion{what: "mac " + mac, cands: indexes(len(nics), func(i int) bool { return nics[i].MAC == mac })})
	if d.Bus == "pci" && hasAddress(d.Address) {
		a := strings.ToLower(d.Address)
		crits = append(crits, criterion{
			what:        "pci " + a,
			cands:       indexes(len(nics), func(i int) bool { return nics[i].PCIFunction() == a }),
			contradicts: func(i int) bool { return nics[i].PCIFunction() != "" && nics[i].PCIFunction() != a },
		})
	}
	if i := decide(r, "NIC", crits, name); i >= 0 {
		n := nics[i]
		r.NIC = &n
	}
}

// SerialLimit is how many bytes of a serial a transport shows the guest;
// a longer metadata serial is compared by its prefix of that length.
func SerialLimit(t sysfs.Transport) int {
	switch t {
	case sysfs.TransportVirtio, sysfs.TransportATA:
		return 20
	case sysfs.TransportSCSI:
		return 36
	}
	return 0
}

// SerialMatches reports whether a disk reporting guest as its serial over
// transport t is the disk whose metadata serial is meta.
func SerialMatches(t sysfs.Transport, guest, meta string) bool {
	if guest == "" || meta == "" {
		return false
	}
	if guest == meta {
		return true
	}
	n := SerialLimit(t)
	return n > 0 && len(guest) == n && len(meta) > n && meta[:n] == guest
}

// SCSIAddress is a parsed drive address controller:bus:target:unit (hex).
type SCSIAddress struct {
	Controller, Bus, Target, Unit uint64
}

// ParseSCSIAddress parses the metadata form of a SCSI address.
func ParseSCSIAddress(s string) (SCSIAddress, error) {
	f := strings.Split(s, ":")
	if len(f) != 4 {
		return SCSIAddress{}, fmt.Errorf("SCSI address %q: want controller:bus:target:unit", s)
	}
	var v [4]uint64
	for i, x := range f {
		n, err := strconv.ParseUint(x, 16, 32)
		if err != nil {
			return SCSIAddress{}, fmt.Errorf("SCSI address %q: %q is not a hex number", s, x)
		}
		v[i] = n
	}
	return SCSIAddress{v[0], v[1], v[2], v[3]}, nil
}

// scsiFits reports whether disk k sits at the drive address a.
func scsiFits(k *sysfs.Disk, a SCSIAddress) bool {
	if k.HCTL == nil {
		return false
	}
	switch k.Transport {
	case sysfs.TransportSCSI:
		return k.HCTL.Channel == a.Bus && k.HCTL.Target == a.Target && k.HCTL.LUN == a.Unit
	case sysfs.TransportATA:
		return a.Bus == 0 && a.Target == 0 && k.ATAPort >= 0 && uint64(k.ATAPort) == a.Unit
	}
	return false
}

// ideFits reports whether disk k sits at IDE address bus:unit.
func ideFits(k *sysfs.Disk, bus, unit uint64) bool {
	return k.Transport == sysfs.TransportATA && k.HCTL != nil && k.ATAPort >= 0 &&
		uint64(k.ATAPort) == bus && k.HCTL.Target == unit
}

func matchDisk(r *Result, inv *sysfs.Inventory) {
	d := r.Device
	var disks []*sysfs.Disk
	for i := range inv.Disks {
		if !inv.Disks[i].Virtual {
			disks = append(disks, &inv.Disks[i])
		}
	}
	name := func(i int) string { return disks[i].Name }
	var crits []criterion
	if hasAddress(d.Address) {
		a := strings.ToLower(d.Address)
		switch d.Bus {
		case "pci":
			crits = append(crits, criterion{
				what:        "pci " + a,
				cands:       indexes(len(disks), func(i int) bool { return disks[i].PCIFunction() == a }),
				contradicts: func(i int) bool { return disks[i].PCIFunction() != "" && disks[i].PCIFunction() != a },
			})
		case "scsi":
			sa, err := ParseSCSIAddress(a)
			if err != nil {
				r.Status, r.Reason = Unmatched, err.Error()
				return
			}
			crits = append(crits, criterion{
				what:  "scsi " + a,
				cands: indexes(len(disks), func(i int) bool { return scsiFits(disks[i], sa) }),
				// A disk on another HBA type has no SCSI address to
				// compare; one on a SCSI or ATA host visibly has.
				contradicts: func(i int) bool {
					t := disks[i].Transport
					return (t == sysfs.TransportSCSI || t == sysfs.TransportATA) && !scsiFits(disks[i], sa)
				},
			})
		case "ide":
			var b, u uint64
			if _, err := fmt.Sscanf(a, "%d:%d", &b, &u); err != nil {
				r.Status, r.Reason = Unmatched, fmt.Sprintf("IDE address %q: want bus:unit", a)
				return
			}
			crits = append(crits, criterion{what: "ide " + a, cands: indexes(len(disks), func(i int) bool { return ideFits(disks[i], b, u) })})
		default:
			// usb, xen: addresses the guest cannot relate to sysfs
			// here; the serial or path must do.
			r.Notes = append(r.Notes, fmt.Sprintf("%s address %s is not used for matching", d.Bus, a))
		}
	}
	if d.Serial != "" {
		crits = append(crits, criterion{
			what:  "serial " + d.Serial,
			cands: indexes(len(disks), func(i int) bool { return SerialMatches(disks[i].Transport, disks[i].Serial, d.Serial) }),
			contradicts: func(i int) bool {
				return disks[i].Serial != "" && !SerialMatches(disks[i].Transport, disks[i].Serial, d.Serial)
			},
		})
	}
	if d.Path != "" {
		crits = append(crits, criterion{
			what:        "path " + d.Path,
			cands:       indexes(len(disks), func(i int) bool { return disks[i].DevNode == d.Path }),
			contradicts: func(i int) bool { return true },
		})
	}
	if i := decide(r, "disk", crits, name); i >= 0 {
		k := *disks[i]
		r.Disk = &k
	}
}

func matchShare(r *Result, inv *sysfs.Inventory) {
	v := inv.VirtioFS
	switch {
	case v.TagsKnown && v.Tags[r.Device.Tag]:
		r.Status = Present
	case v.TagsKnown:
		r.Status, r.Reason = Absent, fmt.Sprintf("the host offers no virtiofs tag %q", r.Device.Tag)
	default:
		r.Status = Unknown
		r.Reason = "this kernel does not list virtiofs tags; only mounting tells"
	}
}

func indexes(n int, ok func(int) bool) []int {
	var out []int
	for i := range n {
		if ok(i) {
			out = append(out, i)
		}
	}
	return out
}
