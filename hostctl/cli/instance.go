package cli

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/atomicfile"
	"github.com/vmeta/vmeta/internal/model"
)

// instanceCommands are `hostctl instance apply|list|show|delete`.
func instanceCommands() []*Command {
	return append([]*Command{
		{Name: "instance apply", Args: "-f SPEC.yaml", Summary: "create or update an instance", Client: true, Setup: instanceApply},
		{Name: "instance list", Summary: "list this host's instances (--all-hosts: every host's)", Client: true, Setup: instanceList},
		{Name: "instance show", Args: "NAME", Summary: "show one instance", Client: true, Setup: noFlags(instanceShow)},
		{Name: "instance delete", Args: "NAME", Summary: "delete an instance", Client: true, Setup: instanceDelete},
		{Name: "instance adopt", Args: "NAME", Summary: "take over a dead host's instance (after moving its disks here)", Client: true, Setup: noFlags(instanceAdopt)},
	}, append(migrateCommands(), evacuateCommands()...)...) // migrate.go, evacuate.go
}

// noFlags is the Setup of a command without flags of its own.
func noFlags(run func(ctx context.Context, c *Call) error) func(*flag.FlagSet) func(context.Context, *Call) error {
	return func(*flag.FlagSet) func(context.Context, *Call) error { return run }
}

func instanceApply(fs *flag.FlagSet) func(context.Context, *Call) error {
	file := fs.String("f", "", "instance spec file (YAML or JSON); - reads standard input")
	return func(ctx context.Context, c *Call) error {
		if err := c.NoArgs(); err != nil {
			return err
		}
		if *file == "" {
			return Usagef("instance apply needs -f SPEC")
		}
		spec, err := readFile(ctx, c.Stdin, "spec", *file, model.MaxSpecSize)
		if err != nil {
			return err
		}
		inst, err := c.Client().Apply(ctx, spec)
		if err != nil {
			return err
		}
		return printApplied(c, inst)
	}
}

func printApplied(c *Call, inst *types.Instance) error {
	env := c.Env
	if c.JSON() {
		return c.PrintJSON(inst)
	}
	fmt.Fprintf(env.Stdout, "instance %s applied (uuid %s, revision %d, metadata version %d)\n",
		inst.Spec.Name, inst.Spec.UUID, inst.Revision, inst.DocumentVersion)
	if inst.State != "" {
		fmt.Fprintf(env.Stdout, "domain: %s\n", inst.State)
	}
	if inst.ConfigDrive != "" {
		fmt.Fprintf(env.Stdout, "config drive: %s\n", inst.ConfigDrive)
	}
	for _, w := range inst.Warnings {
		fmt.Fprintf(env.Stderr, "warning: %s\n", w)
	}
	return nil
}

func instanceList(fs *flag.FlagSet) func(context.Context, *Call) error {
	all := fs.Bool("all-hosts", false, "list every host's instances, with a HOST column")
	return func(ctx context.Context, c *Call) error {
		if err := c.NoArgs(); err != nil {
			return err
		}
		list := c.Client().List
		if *all {
			list = c.Client().ListAll
		}
		insts, err := list(ctx)
		if err != nil {
			return err
		}
		return printInstances(c, insts, *all)
	}
}

func printInstances(c *Call, insts []*types.Instance, withHost bool) error {
	if c.JSON() {
		if insts == nil {
			insts = []*types.Instance{}
		}
		return c.PrintJSON(insts)
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	// The STATE column only when the daemon runs domains (states are
	// empty with --virt none).
	withState := slices.ContainsFunc(insts, func(in *types.Instance) bool { return in.State != "" })
	head := "NAME\tUUID\t"
	if withHost {
		head += "HOST\t"
	}
	if withState {
		head += "STATE\t"
	}
	fmt.Fprintln(tw, head+"ADDRESSES\tDISKS\tNICS\tSHARES\tREVISION")
	for _, in := range insts {
		s := in.Spec
		cols := ""
		if withHost {
			cols += orDash(in.Host) + "\t"
		}
		if withState {
			cols += orDash(in.State) + "\t"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s%s\t%d\t%d\t%d\t%d\n", s.Name, s.UUID, cols, orDash(strings.Join(s.Addresses, ",")),
			len(s.Disks), len(s.NICs), len(s.Shares), in.Revision)
	}
	return tw.Flush()
}

func instanceShow(ctx context.Context, c *Call) error {
	name, err := c.OneName()
	if err != nil {
		return err
	}
	inst, err := c.Client().Get(ctx, name)
	if err != nil {
		return err
	}
	if c.JSON() {
		return c.PrintJSON(inst)
	}
	env := c.Env
	s := inst.Spec
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	rows := [][2]string{{"Name", s.Name}, {"UUID", s.UUID}, {"Host", orDash(inst.Host)}}
	if inst.State != "" {
		rows = append(rows, [2]string{"State", inst.State})
	}
	if inst.Fault != "" {
		rows = append(rows, [2]string{"Fault", inst.Fault + " (hostctl instance reboot --hard " + s.Name + ")"})
	}
	for _, kv := range append(rows, [][2]string{
		{"Hostname", s.Hostname}, {"Project", orDash(s.ProjectID)},
		{"Flavor", orDash(s.Flavor)}, {"Image", orDash(s.Image)}, {"Size", sizeOf(s.VCPUs, s.MemoryMiB)},
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
	if err := printTransports(env, inst.Transports); err != nil {
		return err
	}
	if err := printDevices(env, inst); err != nil {
		return err
	}
	if err := printHostDevices(env, inst); err != nil {
		return err
	}
	return printBlockDevices(env, inst)
}

// printHostDevices prints the domain devices the host's parts give the
// instance (a watchdog).
func printHostDevices(env Env, inst *types.Instance) error {
	if len(inst.HostDevices) == 0 {
		return nil
	}
	fmt.Fprintln(env.Stdout)
	fmt.Fprintln(env.Stdout, "Host devices:")
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tDEVICE")
	for _, d := range inst.HostDevices {
		fmt.Fprintf(tw, "%s\t%s\n", d.Kind, d.Detail)
	}
	return tw.Flush()
}

// printTransports prints the metadata revision each transport carries to
// the guest.
func printTransports(env Env, ts []types.Transport) error {
	if len(ts) == 0 {
		return nil
	}
	fmt.Fprintln(env.Stdout, "Metadata transports (the revision each carries to the guest):")
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TRANSPORT	REVISION	NEXT BOOT	NOTE")
	rev := func(n int64) string {
		if n == 0 {
			return "-"
		}
		return fmt.Sprint(n)
	}
	for _, t := range ts {
		next := rev(t.NextBoot)
		if t.NextBoot == 0 || t.NextBoot == t.Revision {
			next = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Name, rev(t.Revision), next, orDash(t.Note))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout)
	return nil
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

func instanceDelete(fs *flag.FlagSet) func(context.Context, *Call) error {
	force := fs.Bool("force-from-store", false, "remove only the store record of an instance whose host is down (that host's domain, disks and files stay)")
	return func(ctx context.Context, c *Call) error {
		name, err := c.OneName()
		if err != nil {
			return err
		}
		if *force {
			left, err := c.Client().ForceDeleteFromStore(ctx, name)
			if err != nil {
				return err
			}
			if c.JSON() {
				return c.PrintJSON(types.ForceDeleteResult{Left: left})
			}
			fmt.Fprintf(c.Stdout, "instance %s removed from the store; not cleaned (out of this host's reach):\n", name)
			for _, l := range left {
				fmt.Fprintf(c.Stdout, "  - %s\n", l)
			}
			return nil
		}
		if err := c.Client().Delete(ctx, name); err != nil {
			return err
		}
		if c.JSON() {
			return c.PrintJSON(map[string]string{"deleted": name})
		}
		fmt.Fprintf(c.Stdout, "instance %s deleted\n", name)
		return nil
	}
}

func instanceAdopt(ctx context.Context, c *Call) error {
	name, err := c.OneName()
	if err != nil {
		return err
	}
	inst, err := c.Client().Adopt(ctx, name)
	if err != nil {
		return err
	}
	if c.JSON() {
		return c.PrintJSON(inst)
	}
	fmt.Fprintf(c.Stdout, "instance %s now lives on %s (revision %d); apply its spec here to define its domain\n", name, inst.Host, inst.Revision)
	return nil
}

// configDriveCommand is `hostctl configdrive build`.
func configDriveCommand() *Command {
	return &Command{Name: "configdrive build", Args: "NAME -o FILE", Summary: "write an instance's config drive", Client: true,
		Setup: func(fs *flag.FlagSet) func(context.Context, *Call) error {
			out := fs.String("o", "", "output file")
			format := fs.String("format", "iso9660", "drive format: iso9660 or vfat")
			return func(ctx context.Context, c *Call) error {
				name, err := c.OneName()
				if err != nil {
					return err
				}
				if *out == "" {
					return Usagef("configdrive build needs -o FILE")
				}
				img, err := c.Client().ConfigDrive(ctx, name, *format)
				if err != nil {
					return err
				}
				if err := atomicfile.WriteFile(*out, img, 0o644); err != nil {
					return err
				}
				if c.JSON() {
					return c.PrintJSON(map[string]any{"file": *out, "bytes": len(img), "format": *format})
				}
				fmt.Fprintf(c.Stdout, "config drive of %s written to %s (%d bytes, %s)\n", name, *out, len(img), *format)
				return nil
			}
		}}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
