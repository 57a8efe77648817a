package guest

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/vmeta/vmeta/guest/shares"
	"github.com/vmeta/vmeta/guest/sysfs"
	"github.com/vmeta/vmeta/guest/udev"
)

// WriteStatusTable prints the state as a table: one row per device of the
// metadata, then the problems.
func WriteStatusTable(w io.Writer, st *State) error {
	fmt.Fprintf(w, "source: %s\n", st.Origin)
	if st.Source != "" || st.Revision > 0 {
		rev := "none"
		if st.Revision > 0 {
			rev = fmt.Sprint(st.Revision)
		}
		fmt.Fprintf(w, "applied from: %s, metadata revision %s\n", dash(st.Source), rev)
	}
	for _, r := range st.Sources {
		switch {
		case r.Used:
			fmt.Fprintf(w, "  %-18s revision %d (used)\n", r.Source+":", r.Revision)
		case r.Error == "":
			fmt.Fprintf(w, "  %-18s revision %d\n", r.Source+":", r.Revision)
		case r.Absent:
			fmt.Fprintf(w, "  %-18s absent\n", r.Source+":")
		default:
			fmt.Fprintf(w, "  %-18s not used: %s\n", r.Source+":", r.Error)
		}
	}
	if !st.Time.IsZero() {
		fmt.Fprintf(w, "applied: %s\n", st.Time.Format("2006-01-02 15:04:05Z07:00"))
	}
	if st.LastError != "" {
		fmt.Fprintf(w, "last error (%s, nothing changed): %s\n", st.LastErrorTime.Format("15:04:05Z07:00"), st.LastError)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tBUS\tADDRESS\tTAGS\tENCRYPTED\tMATCHED\tMOUNT POINT\tSTATUS")
	for _, d := range st.Devices {
		tags := strings.Join(d.Tags, ",")
		if d.Type == "share" {
			tags = d.ShareTag
		}
		matched := d.Node
		if d.Interface != "" {
			matched = d.Interface
		}
		enc := "-"
		if d.Type == "disk" {
			enc = "no"
			if d.Encrypted {
				enc = "yes"
			}
		}
		id := d.Address
		if d.Type == "nic" {
			id = d.Address + " " + d.MAC
		} else if d.Serial != "" {
			id = d.Address + " " + d.Serial
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Type, d.Bus, id, dash(tags), enc, dash(matched), dash(d.MountPoint), d.Status)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Problems) > 0 {
		fmt.Fprintln(w, "\nproblems:")
		for _, p := range st.Problems {
			fmt.Fprintf(w, "  - %s\n", p)
		}
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteStatusJSON prints the state as JSON.
func WriteStatusJSON(w io.Writer, st *State) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(st)
}

// FindOptions select what Find looks at.
type FindOptions struct {
	// Type is "disk", "nic", "share" or "" for all three.
	Type string
	// SysRoot, DevRoot: "/sys", "/dev".
	SysRoot, DevRoot string
	UdevDB           UdevDB
	Mounter          shares.Mounter
	// StateDir holds the state, asked when udev has no answer.
	StateDir string
}

// Find returns what carries tag: disks (device nodes) and NICs (current
// interface names) as udev's database records them (VMETA_TAGS), so the
// answer is what udev applied; when udev has no record (udevd not
// running), the agent's state. For shares, tag is the virtiofs tag and
// the answer its mount point.
func Find(tag string, o FindOptions) ([]string, error) {
	if o.UdevDB == nil {
		o.UdevDB = udev.DB{}
	}
	if o.Mounter == nil {
		o.Mounter = shares.System{}
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	want := func(t string) bool { return o.Type == "" || o.Type == t }
	var out []string
	var inv *sysfs.Inventory
	if want("disk") || want("nic") {
		var err error
		inv, err = sysfs.Scanner{Root: o.SysRoot, DevRoot: o.DevRoot}.Scan()
		if err != nil {
			return nil, err
		}
	}
	enc := udev.EncodeTag(tag)
	has := func(id string) bool {
		e, err := o.UdevDB.Entry(id)
		return err == nil && slices.Contains(strings.Fields(e.Props[udev.PropTags]), enc)
	}
	udevAnswered := o.UdevDB.Running()
	if want("disk") && udevAnswered {
		for _, k := range inv.Disks {
			if k.Major != "" && has(udev.BlockID(k.Major, k.Minor)) {
				out = append(out, k.DevNode)
			}
		}
	}
	if want("nic") && udevAnswered {
		for _, n := range inv.NICs {
			if has(udev.NetID(n.Index)) {
				out = append(out, n.Name)
			}
		}
	}
	if !udevAnswered && (want("disk") || want("nic")) {
		if st, err := ReadState(o.StateDir); err == nil {
			for _, d := range st.Devices {
				if !slices.Contains(d.Tags, tag) || d.Status != "matched" || !want(d.Type) {
					continue
				}
				switch d.Type {
				case "disk":
					out = append(out, d.Node)
				case "nic":
					name := d.Interface
					for _, n := range inv.NICs {
						if n.Index == d.IfIndex {
							name = n.Name // renamed since
						}
					}
					out = append(out, name)
				}
			}
		}
	}
	if want("share") {
		ms, err := o.Mounter.Mounts()
		if err != nil {
			return nil, err
		}
		out = append(out, shares.TagMounts(ms, tag)...)
	}
	return out, nil
}
