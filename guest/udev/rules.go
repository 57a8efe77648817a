// Package udev writes the agent's udev rules and talks to udev: it
// encodes tags for udev (EncodeTag), renders one rules file for
// /run/udev/rules.d/ that sets VMETA_TAGS, VMETA_ENCRYPTED and
// disk/by-tag/ links, writes it atomically, runs udevadm (reload, trigger
// the affected devices, settle) and reads udev's database
// (/run/udev/data) to learn what udev has actually applied.
//
// Rules match a disk by its DEVPATH (the exact sysfs device the agent
// matched; a disk's kernel name never changes while it is present, and
// the agent rewrites the rules whenever devices come and go) and its
// partitions by the DEVPATHs below it; a NIC by its MAC together with its
// PCI function (KERNELS==), because a NIC's DEVPATH ends in its name,
// which renaming (ens3) changes.
package udev

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
)

// Properties the rules set.
const (
	PropTags      = "VMETA_TAGS"
	PropEncrypted = "VMETA_ENCRYPTED"
)

// LinkDir is the directory under /dev of the tag links.
const LinkDir = "disk/by-tag"

// DefaultRulesFile is where the rules go: after 60-persistent-storage.rules
// (so ID_SERIAL and friends are set when they run), in /run (volatile: the
// agent writes them every boot; /etc/udev/rules.d belongs to the admin).
const DefaultRulesFile = "/run/udev/rules.d/70-vmeta-agent.rules"

// Disk is what the rules say about one disk.
type Disk struct {
	DevPath   string
	Tags      []string // raw tags
	Links     []string // raw tags that also get a link (tags unique among disks)
	Encrypted bool
}

// NIC is what the rules say about one NIC.
type NIC struct {
	MAC  string // lower case, as sysfs shows it
	PCI  string // PCI function, "" if none
	Tags []string
}

// Rules is the whole rules file.
type Rules struct {
	Disks []Disk
	NICs  []NIC
}

// safeMatch reports whether s may appear inside a match string unquoted
// by any escape: no glob (*?[), no alternation (|), no quote or
// backslash; non-empty, of A-Z a-z 0-9 and /:._+@=,- only
// (`^[A-Za-z0-9/:._+@=,-]+$`; no regular expressions are compiled at the
// agent's start).
func safeMatch(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && !strings.ContainsRune("/:._+@=,-", rune(c)) {
			return false
		}
	}
	return s != ""
}

// Check reports values that cannot be written into a rule safely.
func (r *Rules) Check() error {
	for _, d := range r.Disks {
		if !safeMatch(d.DevPath) {
			return fmt.Errorf("disk %q: the sysfs path has characters a udev match cannot hold", d.DevPath)
		}
		for _, t := range d.Links {
			if len(EncodeTag(t)) > MaxLinkName {
				return fmt.Errorf("tag %q is too long for a link name", t)
			}
		}
	}
	for _, n := range r.NICs {
		if !safeMatch(n.MAC) || (n.PCI != "" && !safeMatch(n.PCI)) {
			return fmt.Errorf("NIC %q at %q: cannot be matched in a udev rule", n.MAC, n.PCI)
		}
	}
	return nil
}

// TagValue is the VMETA_TAGS value for tags: encoded, space-separated,
// in the metadata's order.
func TagValue(tags []string) string {
	enc := make([]string, len(tags))
	for i, t := range tags {
		enc[i] = EncodeTag(t)
	}
	return strings.Join(enc, " ")
}

// LinkName is the link under /dev of tag ("disk/by-tag/<encoded>").
func LinkName(tag string) string { return LinkDir + "/" + EncodeTag(tag) }

// Render writes the rules file. The output depends only on r (sorted,
// no time stamps), so unchanged metadata gives an identical file.
func (r *Rules) Render() ([]byte, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString("# Written by vmeta-agent from the instance's device metadata; rewritten\n")
	b.WriteString("# whenever the metadata or the devices change. Do not edit: put your own\n")
	b.WriteString("# rules in /etc/udev/rules.d/. Tags are encoded as /dev/disk/by-label\n")
	b.WriteString("# encodes labels (\\xHH for other characters), space-separated in " + PropTags + ".\n")
	b.WriteString(`ACTION=="remove", GOTO="vmeta_agent_end"` + "\n")
	b.WriteString(`SUBSYSTEM!="block|net", GOTO="vmeta_agent_end"` + "\n")
	disks := append([]Disk(nil), r.Disks...)
	sort.Slice(disks, func(i, j int) bool { return disks[i].DevPath < disks[j].DevPath })
	for _, d := range disks {
		if len(d.Tags) == 0 && !d.Encrypted {
			continue
		}
		var set, partSet []string
		if len(d.Tags) > 0 {
			v := fmt.Sprintf(`ENV{%s}="%s"`, PropTags, TagValue(d.Tags))
			set, partSet = append(set, v), append(partSet, v)
		}
		if d.Encrypted {
			v := fmt.Sprintf(`ENV{%s}="1"`, PropEncrypted)
			set, partSet = append(set, v), append(partSet, v)
		}
		for _, t := range d.Links {
			set = append(set, fmt.Sprintf(`SYMLINK+="%s"`, LinkName(t)))
			partSet = append(partSet, fmt.Sprintf(`SYMLINK+="%s-part%%n"`, LinkName(t)))
		}
		fmt.Fprintf(&b, `SUBSYSTEM=="block", ENV{DEVTYPE}=="disk", ENV{DEVPATH}=="%s", %s`+"\n", d.DevPath, strings.Join(set, ", "))
		fmt.Fprintf(&b, `SUBSYSTEM=="block", ENV{DEVTYPE}=="partition", ENV{DEVPATH}=="%s/*", %s`+"\n", d.DevPath, strings.Join(partSet, ", "))
	}
	nics := append([]NIC(nil), r.NICs...)
	sort.Slice(nics, func(i, j int) bool { return nics[i].MAC+nics[i].PCI < nics[j].MAC+nics[j].PCI })
	for _, n := range nics {
		if len(n.Tags) == 0 {
			continue
		}
		match := fmt.Sprintf(`SUBSYSTEM=="net", ATTR{address}=="%s"`, n.MAC)
		if n.PCI != "" {
			match += fmt.Sprintf(`, KERNELS=="%s"`, n.PCI)
		}
		fmt.Fprintf(&b, `%s, ENV{%s}="%s"`+"\n", match, PropTags, TagValue(n.Tags))
	}
	b.WriteString(`LABEL="vmeta_agent_end"` + "\n")
	return b.Bytes(), nil
}
