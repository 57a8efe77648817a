package cli

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
)

// affectHelp is the --help text of the device commands.
const affectHelp = `Without --live or --config the change applies to the persistent
configuration, and to the running one when the domain runs.`

// powerCommands are `hostctl instance start|stop|reboot`: they drive libvirt
// domains through the daemon.
func powerCommands() []*Command {
	return []*Command{
		{Name: "instance start", Args: "NAME", Summary: "boot an instance's domain", Client: true,
			Setup: func(fs *flag.FlagSet) func(context.Context, *Call) error {
				return instanceOp(func(ctx context.Context, c *client.Client, name string) (*types.Instance, string, error) {
					inst, err := c.Start(ctx, name)
					return inst, fmt.Sprintf("instance %s started", name), err
				})
			}},
		{Name: "instance stop", Args: "NAME [--timeout 30s]", Summary: "shut it down, then power off", Client: true,
			Setup: func(fs *flag.FlagSet) func(context.Context, *Call) error {
				timeout := fs.Duration("timeout", types.DefaultStopTimeout, "how long to wait for the guest to shut down before powering it off")
				return instanceOp(func(ctx context.Context, c *client.Client, name string) (*types.Instance, string, error) {
					if *timeout <= 0 {
						return nil, "", Usagef("--timeout must be positive")
					}
					inst, err := c.Stop(ctx, name, *timeout)
					return inst, fmt.Sprintf("instance %s stopped", name), err
				})
			}},
		{Name: "instance reboot", Args: "NAME [--hard]", Summary: "reboot it (--hard: power off and start; the way out of ERROR)", Client: true,
			Help: `A soft reboot asks the guest of a running instance to reboot (libvirt's
reboot: the domain, its mounts and devices stay). A hard reboot powers it off (if running) and starts it: it
retries the mounts of its shares, and an instance in ERROR (a start
failed on a share mount) leaves ERROR when the start succeeds. A plain
start of an instance in ERROR is refused.`,
			Setup: func(fs *flag.FlagSet) func(context.Context, *Call) error {
				hard := fs.Bool("hard", false, "power off and start again (needed for an instance in ERROR)")
				return instanceOp(func(ctx context.Context, c *client.Client, name string) (*types.Instance, string, error) {
					inst, err := c.Reboot(ctx, name, *hard)
					return inst, fmt.Sprintf("instance %s rebooted", name), err
				})
			}},
	}
}

// hotplugCommands are `hostctl instance attach-disk|detach-disk|attach-nic|detach-nic`.
func hotplugCommands() []*Command {
	return []*Command{
		{Name: "instance attach-disk", Args: "NAME --tag T", Summary: "create and attach a disk", Help: affectHelp, Client: true,
			Setup: func(fs *flag.FlagSet) func(context.Context, *Call) error {
				var req types.DiskRequest
				fs.StringVar(&req.Tag, "tag", "", "device role tag the guest sees")
				fs.StringVar(&req.Bus, "bus", "virtio", "bus: virtio, scsi, sata or usb")
				fs.StringVar(&req.Size, "size", types.DefaultDiskSize, "size of the new blank disk (qemu-img syntax)")
				fs.StringVar(&req.Serial, "serial", "", "disk serial")
				fs.StringVar(&req.Target, "target", "", "target name (vdX, sdX); the first free one on the bus by default")
				fs.BoolFunc("encrypted", "create the disk encrypted at rest (LUKS, with its own secret); --encrypted=false asks for it unencrypted (refused where the flavor or image encrypts); the flavor and image decide when left out", func(v string) error {
					b, err := strconv.ParseBool(v)
					if err != nil {
						return fmt.Errorf("--encrypted=%s: want true or false", v)
					}
					req.Encrypted = &b
					return nil
				})
				affectFlags(fs, &req.Affect)
				return instanceOp(func(ctx context.Context, c *client.Client, name string) (*types.Instance, string, error) {
					inst, err := c.AttachDisk(ctx, name, req)
					return inst, fmt.Sprintf("disk attached to %s", name), err
				})
			}},
		{Name: "instance detach-disk", Args: "NAME (--tag T | --target vdX)", Summary: "detach a disk", Help: affectHelp, Client: true,
			Setup: func(fs *flag.FlagSet) func(context.Context, *Call) error {
				var req types.DetachRequest
				fs.StringVar(&req.Tag, "tag", "", "the disk's tag")
				fs.StringVar(&req.Target, "target", "", "the disk's target name (instead of --tag)")
				affectFlags(fs, &req.Affect)
				return instanceOp(func(ctx context.Context, c *client.Client, name string) (*types.Instance, string, error) {
					if (req.Tag == "") == (req.Target == "") {
						return nil, "", Usagef("instance detach-disk needs exactly one of --tag or --target")
					}
					inst, err := c.DetachDisk(ctx, name, req)
					return inst, fmt.Sprintf("disk detached from %s", name), err
				})
			}},
		{Name: "instance attach-nic", Args: "NAME --tag T", Summary: "attach a NIC", Help: affectHelp, Client: true,
			Setup: func(fs *flag.FlagSet) func(context.Context, *Call) error {
				var req types.NICRequest
				fs.StringVar(&req.Tag, "tag", "", "device role tag the guest sees")
				fs.StringVar(&req.MAC, "mac", "", "MAC address (generated when empty)")
				fs.StringVar(&req.Network, "network", "", "libvirt network (the daemon's default network when empty)")
				affectFlags(fs, &req.Affect)
				return instanceOp(func(ctx context.Context, c *client.Client, name string) (*types.Instance, string, error) {
					inst, err := c.AttachNIC(ctx, name, req)
					return inst, fmt.Sprintf("NIC attached to %s", name), err
				})
			}},
		{Name: "instance detach-nic", Args: "NAME (--tag T | --mac M)", Summary: "detach a NIC", Help: affectHelp, Client: true,
			Setup: func(fs *flag.FlagSet) func(context.Context, *Call) error {
				var req types.DetachRequest
				fs.StringVar(&req.Tag, "tag", "", "the NIC's tag")
				fs.StringVar(&req.MAC, "mac", "", "the NIC's MAC (instead of --tag)")
				affectFlags(fs, &req.Affect)
				return instanceOp(func(ctx context.Context, c *client.Client, name string) (*types.Instance, string, error) {
					if (req.Tag == "") == (req.MAC == "") {
						return nil, "", Usagef("instance detach-nic needs exactly one of --tag or --mac")
					}
					inst, err := c.DetachNIC(ctx, name, req)
					return inst, fmt.Sprintf("NIC detached from %s", name), err
				})
			}},
	}
}

// affectFlags adds --live and --config.
func affectFlags(fs *flag.FlagSet, a *types.Affect) {
	fs.BoolVar(&a.Live, "live", false, "change the running domain")
	fs.BoolVar(&a.Config, "config", false, "change the persistent definition")
}

// instanceOp runs a one-instance command: op against the daemon, then
// the instance it returns is printed (JSON, or a summary line, the
// warnings and the device table).
func instanceOp(op func(ctx context.Context, c *client.Client, name string) (*types.Instance, string, error)) func(context.Context, *Call) error {
	return func(ctx context.Context, c *Call) error {
		name, err := c.OneName()
		if err != nil {
			return err
		}
		inst, summary, err := op(ctx, c.Client(), name)
		if err != nil {
			return err
		}
		if c.JSON() {
			return c.PrintJSON(inst)
		}
		fmt.Fprintf(c.Stdout, "%s (state %s, revision %d)\n", summary, orDash(inst.State), inst.Revision)
		for _, w := range inst.Warnings {
			fmt.Fprintf(c.Stdout, "warning: %s\n", w)
		}
		fmt.Fprintln(c.Stdout)
		return printDevices(c.Env, inst)
	}
}
