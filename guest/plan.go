package guest

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vmeta/vmeta/guest/match"
	"github.com/vmeta/vmeta/guest/sysfs"
	"github.com/vmeta/vmeta/guest/udev"
)

// plan is what one pass wants the system to look like.
type plan struct {
	rules udev.Rules
	// want maps a udev database id (b252:16, n3) to what udev should
	// hold for that device; devices absent from the map should hold
	// nothing of the agent's.
	want map[string]wantProps
	// sysPath maps every database id the pass looked at to its DEVPATH.
	sysPath map[string]string
	// names maps a database id to the device's name, for messages.
	names map[string]string
	// altnames maps an interface index to its wanted alternative names.
	altnames map[int][]string
	nicMAC   map[int]string
	shares   []shareWant
	problems []string
}

type wantProps struct {
	tags      string   // VMETA_TAGS value
	encrypted bool     // VMETA_ENCRYPTED=1
	links     []string // links under /dev (disk/by-tag/...)
}

type shareWant struct {
	tag, dir string
	absent   bool // the kernel lists tags and this one is not there
}

// describe names a metadata entry for messages: "disk /devices/2 (tags
// oracledb)".
func describe(r *match.Result) string {
	d := r.Device
	s := fmt.Sprintf("%s /devices/%d", d.Type, r.Index)
	switch {
	case d.Type == "share":
		s += fmt.Sprintf(" (tag %q)", d.Tag)
	case len(d.Tags) > 0:
		s += fmt.Sprintf(" (tags %s)", quoteAll(d.Tags))
	}
	return s
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// buildPlan turns match results into the wanted rules, udev properties,
// altnames and mounts, and lists the problems.
func buildPlan(results []match.Result, inv *sysfs.Inventory, shareRoot string) *plan {
	p := &plan{
		want:     map[string]wantProps{},
		sysPath:  map[string]string{},
		names:    map[string]string{},
		altnames: map[int][]string{},
		nicMAC:   map[int]string{},
	}
	for _, k := range inv.Disks {
		if k.Major == "" {
			continue
		}
		id := udev.BlockID(k.Major, k.Minor)
		p.sysPath[id], p.names[id] = k.DevPath, k.Name
		for _, part := range k.Partitions {
			if pid, ok := partID(part); ok {
				p.sysPath[pid], p.names[pid] = part.DevPath, part.Name
			}
		}
	}
	for _, n := range inv.NICs {
		id := udev.NetID(n.Index)
		p.sysPath[id], p.names[id] = n.DevPath, n.Name
	}

	// Gather tags per matched device; several entries may describe one
	// device (their tags merge).
	type diskAcc struct {
		disk      *sysfs.Disk
		tags      []string
		encrypted bool
		entries   []string
	}
	type nicAcc struct {
		nic     *sysfs.NIC
		tags    []string
		entries []string
	}
	disks := map[string]*diskAcc{}
	nics := map[int]*nicAcc{}
	var diskOrder []string
	var nicOrder []int
	for i := range results {
		r := &results[i]
		if r.Status != match.Matched && r.Device.Type != "share" {
			p.problems = append(p.problems, fmt.Sprintf("%s: %s: %s", describe(r), r.Status, r.Reason))
			continue
		}
		switch r.Device.Type {
		case "disk":
			acc := disks[r.Disk.DevPath]
			if acc == nil {
				acc = &diskAcc{disk: r.Disk}
				disks[r.Disk.DevPath] = acc
				diskOrder = append(diskOrder, r.Disk.DevPath)
			}
			acc.tags = appendNew(acc.tags, r.Device.Tags...)
			acc.encrypted = acc.encrypted || (r.Device.Encrypted != nil && *r.Device.Encrypted)
			acc.entries = append(acc.entries, describe(r))
		case "nic":
			acc := nics[r.NIC.Index]
			if acc == nil {
				acc = &nicAcc{nic: r.NIC}
				nics[r.NIC.Index] = acc
				nicOrder = append(nicOrder, r.NIC.Index)
			}
			acc.tags = appendNew(acc.tags, r.Device.Tags...)
			acc.entries = append(acc.entries, describe(r))
		case "share":
			w := shareWant{tag: r.Device.Tag, dir: filepath.Join(shareRoot, r.Device.Tag), absent: r.Status == match.Absent}
			p.shares = append(p.shares, w)
		}
	}

	// A link (or altname) can name one device only: a tag on several
	// disks (NICs) gets none, and is reported.
	diskTagOwners := map[string][]string{}
	for _, dp := range diskOrder {
		acc := disks[dp]
		if len(acc.entries) > 1 {
			p.problems = append(p.problems, fmt.Sprintf("%s all describe %s; their tags are merged", strings.Join(acc.entries, " and "), acc.disk.Name))
		}
		for _, t := range acc.tags {
			diskTagOwners[t] = append(diskTagOwners[t], acc.disk.Name)
		}
	}
	for _, dp := range diskOrder {
		acc := disks[dp]
		k := acc.disk
		rd := udev.Disk{DevPath: k.DevPath, Tags: acc.tags, Encrypted: acc.encrypted}
		for _, t := range acc.tags {
			switch {
			case len(diskTagOwners[t]) > 1:
				if diskTagOwners[t][0] == k.Name {
					p.problems = append(p.problems, fmt.Sprintf("tag %q is on disks %s: no /dev/%s link (it could name either)", t, strings.Join(diskTagOwners[t], ", "), udev.LinkName(t)))
				}
			case len(udev.EncodeTag(t)) > udev.MaxLinkName:
				p.problems = append(p.problems, fmt.Sprintf("tag %q on %s is too long for a link name; it is only in %s", t, k.Name, udev.PropTags))
			default:
				rd.Links = append(rd.Links, t)
			}
		}
		p.rules.Disks = append(p.rules.Disks, rd)
		if k.Major == "" {
			continue
		}
		w := wantProps{encrypted: acc.encrypted}
		if len(acc.tags) > 0 {
			w.tags = udev.TagValue(acc.tags)
		}
		for _, t := range rd.Links {
			w.links = append(w.links, udev.LinkName(t))
		}
		p.want[udev.BlockID(k.Major, k.Minor)] = w
		for _, part := range k.Partitions {
			pid, ok := partID(part)
			if !ok {
				continue
			}
			pw := wantProps{tags: w.tags, encrypted: w.encrypted}
			for _, l := range w.links {
				pw.links = append(pw.links, fmt.Sprintf("%s-part%d", l, part.Number))
			}
			p.want[pid] = pw
		}
	}

	nicTagOwners := map[string][]string{}
	for _, idx := range nicOrder {
		acc := nics[idx]
		if len(acc.entries) > 1 {
			p.problems = append(p.problems, fmt.Sprintf("%s all describe %s; their tags are merged", strings.Join(acc.entries, " and "), acc.nic.Name))
		}
		for _, t := range acc.tags {
			nicTagOwners[t] = append(nicTagOwners[t], acc.nic.Name)
		}
	}
	for _, idx := range nicOrder {
		acc := nics[idx]
		n := acc.nic
		p.rules.NICs = append(p.rules.NICs, udev.NIC{MAC: n.MAC, PCI: n.PCIFunction(), Tags: acc.tags})
		if len(acc.tags) > 0 {
			p.want[udev.NetID(n.Index)] = wantProps{tags: udev.TagValue(acc.tags)}
		}
		p.nicMAC[n.Index] = n.MAC
		for _, t := range acc.tags {
			if len(nicTagOwners[t]) > 1 {
				if nicTagOwners[t][0] == n.Name {
					p.problems = append(p.problems, fmt.Sprintf("tag %q is on NICs %s: no alternative name (it could name either)", t, strings.Join(nicTagOwners[t], ", ")))
				}
				continue
			}
			an, err := udev.AltName(t)
			if err != nil {
				p.problems = append(p.problems, fmt.Sprintf("NIC %s: %v", n.Name, err))
				continue
			}
			p.altnames[n.Index] = append(p.altnames[n.Index], an)
		}
	}
	return p
}

// partID is a partition's database id.
func partID(part sysfs.Partition) (string, bool) {
	if part.Major == "" {
		return "", false
	}
	return udev.BlockID(part.Major, part.Minor), true
}

func appendNew(dst []string, src ...string) []string {
	for _, s := range src {
		if !slices.Contains(dst, s) {
			dst = append(dst, s)
		}
	}
	return dst
}
