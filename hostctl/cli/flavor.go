package cli

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/encryption/policy"
)

// flavorCommands are `hostctl flavor create|list|show|delete`.
func flavorCommands() []*Command {
	return []*Command{
		{Name: "flavor create", Args: "NAME --vcpus N --ram MiB --disk GiB [--ephemeral GiB] [--swap MiB] [--property KEY=VALUE]…",
			Summary: "add a flavor (extra specs: --property, e.g. hw:ephemeral_encryption=true)", Client: true, Setup: flavorCreate,
			Help: "Extra specs that ask for ephemeral storage encryption: hw:ephemeral_encryption (a boolean:\n" +
				"true/false, yes/no, on/off, 1/0, any case) and hw:ephemeral_encryption_format (luks, luksv2, plain).\n" +
				"Other extra specs are kept and shown as given. An instance naming the flavor gets its vCPUs and\n" +
				"RAM, a root disk \"disk\" from its image (--disk GiB; 0: the image's size), an ephemeral disk\n" +
				"\"disk.eph0\" formatted ext4 and labelled ephemeral0 (EC2 ephemeral0, mounted at /mnt by\n" +
				"cloud-init) and a swap disk \"disk.swap\" (EC2 swap)."},
		{Name: "flavor list", Summary: "list the flavors", Client: true, Setup: noFlags(flavorList)},
		{Name: "flavor show", Args: "NAME", Summary: "show a flavor with its extra specs", Client: true, Setup: noFlags(flavorShow)},
		{Name: "flavor delete", Args: "NAME", Summary: "delete a flavor no instance uses", Client: true, Setup: noFlags(flavorDelete)},
	}
}

// propertyFlag registers a repeatable --property KEY=VALUE on fs.
func propertyFlag(fs *flag.FlagSet, usage string) map[string]string {
	props := map[string]string{}
	fs.Func("property", usage, func(s string) error {
		k, v, err := policy.ParseProperty(s)
		if err != nil {
			return err
		}
		if _, dup := props[k]; dup {
			return fmt.Errorf("%s: given twice", k)
		}
		props[k] = v
		return nil
	})
	return props
}

func flavorCreate(fs *flag.FlagSet) func(context.Context, *Call) error {
	var f types.Flavor
	fs.IntVar(&f.VCPUs, "vcpus", 0, "virtual CPUs (required)")
	fs.IntVar(&f.RAM, "ram", 0, "memory in MiB (required)")
	fs.IntVar(&f.Disk, "disk", -1, "root disk in GiB; 0: the image's size (required)")
	fs.IntVar(&f.Ephemeral, "ephemeral", 0, "ephemeral disk in GiB (0: none)")
	fs.IntVar(&f.Swap, "swap", 0, "swap disk in MiB (0: none)")
	fs.StringVar(&f.Description, "description", "", "a description")
	props := propertyFlag(fs, "an extra spec KEY=VALUE (repeatable)")
	return func(ctx context.Context, c *Call) error {
		name, err := c.OneName()
		if err != nil {
			return err
		}
		switch {
		case f.VCPUs == 0:
			return Usagef("flavor create needs --vcpus")
		case f.RAM == 0:
			return Usagef("flavor create needs --ram")
		case f.Disk < 0:
			return Usagef("flavor create needs --disk (0: the image's size)")
		}
		f.Name, f.ExtraSpecs = name, props
		out, err := c.Client().CreateFlavor(ctx, f)
		if err != nil {
			return err
		}
		return printFlavor(c, out)
	}
}

func flavorList(ctx context.Context, c *Call) error {
	if err := c.NoArgs(); err != nil {
		return err
	}
	fs, err := c.Client().Flavors(ctx)
	if err != nil {
		return err
	}
	return printList(c, orEmpty(fs), "NAME\tVCPUS\tRAM (MiB)\tDISK (GiB)\tEPHEMERAL (GiB)\tSWAP (MiB)\tEXTRA SPECS", fs, func(f types.Flavor) string {
		return fmt.Sprintf("%s\t%d\t%d\t%d\t%d\t%d\t%s", f.Name, f.VCPUs, f.RAM, f.Disk, f.Ephemeral, f.Swap, orDash(joinProps(f.ExtraSpecs)))
	})
}

func flavorShow(ctx context.Context, c *Call) error {
	name, err := c.OneName()
	if err != nil {
		return err
	}
	f, err := c.Client().Flavor(ctx, name)
	if err != nil {
		return err
	}
	return printFlavor(c, f)
}

func printFlavor(c *Call, f types.Flavor) error {
	if c.JSON() {
		return c.PrintJSON(f)
	}
	tw := newTable(c.Stdout)
	writeFields(tw, [][2]string{
		{"Name", f.Name}, {"vCPUs", fmt.Sprint(f.VCPUs)}, {"RAM", fmt.Sprintf("%d MiB", f.RAM)},
		{"Disk", diskGiB(f.Disk)}, {"Ephemeral", fmt.Sprintf("%d GiB", f.Ephemeral)}, {"Swap", fmt.Sprintf("%d MiB", f.Swap)},
		{"Description", orDash(f.Description)}, {"Created", f.Created.UTC().Format(time.RFC3339)},
	})
	printProps(tw, "Extra specs", f.ExtraSpecs)
	return tw.Flush()
}

func diskGiB(n int) string {
	if n == 0 {
		return "0 (the image's size)"
	}
	return fmt.Sprintf("%d GiB", n)
}

func printProps(tw *tabwriter.Writer, title string, props map[string]string) {
	if len(props) == 0 {
		fmt.Fprintf(tw, "%s:\t-\n", title)
		return
	}
	fmt.Fprintf(tw, "%s:\t\n", title)
	for _, k := range slices.Sorted(maps.Keys(props)) {
		fmt.Fprintf(tw, "  %s\t%q\n", k, props[k])
	}
}

func joinProps(props map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(props)) {
		parts = append(parts, k+"="+props[k])
	}
	return strings.Join(parts, ", ")
}

func flavorDelete(ctx context.Context, c *Call) error {
	name, err := c.OneName()
	if err != nil {
		return err
	}
	if err := c.Client().DeleteFlavor(ctx, name); err != nil {
		return err
	}
	fmt.Fprintf(c.Stdout, "flavor %s deleted\n", name)
	return nil
}

// sizeOf shows an instance's vCPUs and memory ("-": the host's defaults).
func sizeOf(vcpus, memMiB int) string {
	if vcpus == 0 && memMiB == 0 {
		return "- (the host's defaults)"
	}
	return fmt.Sprintf("%d vCPUs, %d MiB", vcpus, memMiB)
}
