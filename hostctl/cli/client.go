package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/vmeta/vmeta/hostctl/api/types"

	"github.com/vmeta/vmeta/internal/atomicfile"
)

func instanceApply(ctx context.Context, args []string, env Env) error {
	fs, cf := newClientFlags("instance apply", env)
	file := fs.String("f", "", "instance spec file (YAML or JSON); - reads standard input")
	if _, err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if *file == "" {
		return fmt.Errorf("%w: instance apply needs -f SPEC", errUsage)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var spec []byte
	if *file == "-" {
		spec, err = io.ReadAll(env.Stdin)
	} else {
		spec, err = os.ReadFile(*file)
	}
	if err != nil {
		return fmt.Errorf("read spec: %w", err)
	}
	inst, err := c.Apply(ctx, spec)
	if err != nil {
		return err
	}
	if cf.output == "json" {
		return writeJSON(env.Stdout, inst)
	}
	fmt.Fprintf(env.Stdout, "instance %s applied (uuid %s, revision %d, metadata version %d)\n",
		inst.Spec.Name, inst.Spec.UUID, inst.Revision, inst.DocumentVersion)
	if inst.State != "" {
		fmt.Fprintf(env.Stdout, "domain: %s\n", inst.State)
	}
	if inst.ConfigDrive != "" {
		fmt.Fprintf(env.Stdout, "config drive: %s\n", inst.ConfigDrive)
	}
	return nil
}

func instanceList(ctx context.Context, args []string, env Env) error {
	fs, cf := newClientFlags("instance list", env)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: instance list takes no arguments", errUsage)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	insts, err := c.List(ctx)
	if err != nil {
		return err
	}
	if cf.output == "json" {
		if insts == nil {
			insts = []*types.Instance{}
		}
		return writeJSON(env.Stdout, insts)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	// The STATE column only when the daemon runs domains (states are
	// empty with --virt none).
	withState := slices.ContainsFunc(insts, func(in *types.Instance) bool { return in.State != "" })
	if withState {
		fmt.Fprintln(tw, "NAME\tUUID\tSTATE\tADDRESSES\tDISKS\tNICS\tSHARES\tREVISION")
	} else {
		fmt.Fprintln(tw, "NAME\tUUID\tADDRESSES\tDISKS\tNICS\tSHARES\tREVISION")
	}
	for _, in := range insts {
		s := in.Spec
		state := ""
		if withState {
			state = orDash(in.State) + "\t"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s%s\t%d\t%d\t%d\t%d\n", s.Name, s.UUID, state, orDash(strings.Join(s.Addresses, ",")),
			len(s.Disks), len(s.NICs), len(s.Shares), in.Revision)
	}
	return tw.Flush()
}

func instanceShow(ctx context.Context, args []string, env Env) error {
	fs, cf := newClientFlags("instance show", env)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	name, err := oneName("instance show", pos)
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	inst, err := c.Get(ctx, name)
	if err != nil {
		return err
	}
	if cf.output == "json" {
		return writeJSON(env.Stdout, inst)
	}
	s := inst.Spec
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	rows := [][2]string{{"Name", s.Name}, {"UUID", s.UUID}}
	if inst.State != "" {
		rows = append(rows, [2]string{"State", inst.State})
	}
	for _, kv := range append(rows, [][2]string{
		{"Hostname", s.Hostname}, {"Project", orDash(s.ProjectID)},
		{"Addresses", orDash(strings.Join(s.Addresses, ", "))},
		{"Revision", fmt.Sprint(inst.Revision)}, {"Metadata version", fmt.Sprint(inst.DocumentVersion)},
		{"Config drive", orDash(inst.ConfigDrive)},
	}...) {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout)
	return printDevices(env, inst)
}

// printDevices prints the devices list the guest sees at latest.
func printDevices(env Env, inst *types.Instance) error {
	fmt.Fprintln(env.Stdout, "Devices (as the guest sees them at latest):")
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tBUS\tADDRESS\tMAC/SERIAL/SHARE\tTAGS\tENCRYPTED")
	for _, d := range inst.Devices {
		id := d.MAC
		switch d.Type {
		case "disk":
			id = d.Serial
		case "share":
			id = d.ShareID
		}
		tags := strings.Join(d.Tags, ",")
		if d.Type == "share" {
			tags = d.Tag
		}
		enc := "-"
		if d.Encrypted != nil {
			enc = fmt.Sprint(*d.Encrypted)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.Type, d.Bus, d.Address, orDash(id), orDash(tags), enc)
	}
	return tw.Flush()
}

func instanceDelete(ctx context.Context, args []string, env Env) error {
	fs, cf := newClientFlags("instance delete", env)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	name, err := oneName("instance delete", pos)
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	if err := c.Delete(ctx, name); err != nil {
		return err
	}
	if cf.output == "json" {
		return writeJSON(env.Stdout, map[string]string{"deleted": name})
	}
	fmt.Fprintf(env.Stdout, "instance %s deleted\n", name)
	return nil
}

func configDriveBuild(ctx context.Context, args []string, env Env) error {
	fs, cf := newClientFlags("configdrive build", env)
	out := fs.String("o", "", "output file")
	format := fs.String("format", "iso9660", "drive format: iso9660 or vfat")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	name, err := oneName("configdrive build", pos)
	if err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("%w: configdrive build needs -o FILE", errUsage)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	img, err := c.ConfigDrive(ctx, name, *format)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(*out, img, 0o644); err != nil {
		return err
	}
	if cf.output == "json" {
		return writeJSON(env.Stdout, map[string]any{"file": *out, "bytes": len(img), "format": *format})
	}
	fmt.Fprintf(env.Stdout, "config drive of %s written to %s (%d bytes, %s)\n", name, *out, len(img), *format)
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
