package cli

import (
	"context"
	"flag"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// evacuateCommands are `hostctl instance evacuate` (issue 24: evacuation
// of a down host's instances).
func evacuateCommands() []*Command {
	return []*Command{
		{Name: "instance evacuate", Args: "NAME --to HOST", Client: true, Setup: instanceEvacuate,
			Summary: "rebuild a down host's instance on this host (new disks from its image and flavor, a new device, started here)",
			Help: "For an instance whose host is down (its heartbeat older than --host-down-after; refused while it\n" +
				"is fresh). Run it on HOST's hostctl (HOST must be this host): it takes the instance over, makes its\n" +
				"disks anew from its image and flavor (encrypted ones under new secrets wrapped by this host's\n" +
				"key; ephemeral data is not recovered), claims and burns a new one-time-use device, defines the\n" +
				"domain with the same MACs and addresses, publishes its metadata from here and starts it. When the\n" +
				"old host comes back, its hostctl removes what it still holds of the instance (domain, disks,\n" +
				"libvirt secrets, its wrapped secrets, DHCP entries); its burned device stays burned until an\n" +
				"operator cleans it. An evacuation that stopped (state evacuating) is resumed by the same command.\n" +
				"`instance adopt` stays for hosts without a hypervisor (--virt none), shelved instances, and disks\n" +
				"an operator moved by hand. Administrators only."},
	}
}

func instanceEvacuate(fs *flag.FlagSet) func(context.Context, *Call) error {
	to := fs.String("to", "", "the host to rebuild the instance on: this host (required)")
	return func(ctx context.Context, c *Call) error {
		name, err := c.OneName()
		if err != nil {
			return err
		}
		if *to == "" {
			return Usagef("instance evacuate needs --to HOST")
		}
		ev, err := c.Client().Evacuate(ctx, name, *to)
		if err != nil {
			return err
		}
		return printEvacuation(c, ev)
	}
}

func printEvacuation(c *Call, ev types.Evacuation) error {
	if c.JSON() {
		return c.PrintJSON(ev)
	}
	fmt.Fprintf(c.Stdout, "instance %s evacuated from %s: it runs on %s\n", ev.Instance, ev.Source, ev.Dest)
	fmt.Fprintf(c.Stdout, "state:    %s (step %s)\n", ev.State, ev.Step)
	if ev.OldSecrets > 0 {
		fmt.Fprintf(c.Stdout, "%s deletes the %d secret(s) of its old disks when it comes back\n", ev.Source, ev.OldSecrets)
	}
	return nil
}
