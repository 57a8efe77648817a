package cli

import (
	"context"
	"flag"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
)

// virtCommands are the `hostctl instance` subcommands that drive libvirt
// domains through the daemon.
var virtCommands = map[string]func(context.Context, []string, Env) error{
	"start":       instanceStart,
	"stop":        instanceStop,
	"attach-disk": instanceAttachDisk,
	"detach-disk": instanceDetachDisk,
	"attach-nic":  instanceAttachNIC,
	"detach-nic":  instanceDetachNIC,
}

const virtUsage = `  hostctl instance start NAME                    boot an instance's domain
  hostctl instance stop NAME [--timeout 30s]     shut it down, then power off
  hostctl instance attach-disk NAME --tag T [--bus virtio|scsi|sata|usb]
          [--size 1G] [--serial S] [--target vdX] [--live] [--config]
                                                 create and attach a disk
  hostctl instance detach-disk NAME (--tag T | --target vdX) [--live] [--config]
  hostctl instance attach-nic NAME --tag T [--mac M] [--network N] [--live] [--config]
  hostctl instance detach-nic NAME (--tag T | --mac M) [--live] [--config]
                                                 (default: the persistent configuration,
                                                 and the running one when the domain runs)
  hostctl network setup-metadata [--mode dnat|address] [--bridge virbr0]
          [--to ADDR:PORT] [--dry-run] [--remove]
                                                 let guests reach 169.254.169.254:80
`

// affectFlags adds --live and --config.
func affectFlags(fs *flag.FlagSet, a *types.Affect) {
	fs.BoolVar(&a.Live, "live", false, "change the running domain")
	fs.BoolVar(&a.Config, "config", false, "change the persistent definition")
}

func instanceStart(ctx context.Context, args []string, env Env) error {
	fs, cf := newClientFlags("instance start", env)
	return withInstance(ctx, fs, cf, args, env, "instance start", func(c *client.Client, name string) (*types.Instance, string, error) {
		inst, err := c.Start(ctx, name)
		return inst, fmt.Sprintf("instance %s started", name), err
	})
}

func instanceStop(ctx context.Context, args []string, env Env) error {
	fs, cf := newClientFlags("instance stop", env)
	timeout := fs.Duration("timeout", types.DefaultStopTimeout, "how long to wait for the guest to shut down before powering it off")
	return withInstance(ctx, fs, cf, args, env, "instance stop", func(c *client.Client, name string) (*types.Instance, string, error) {
		if *timeout <= 0 {
			return nil, "", fmt.Errorf("%w: --timeout must be positive", errUsage)
		}
		inst, err := c.Stop(ctx, name, *timeout)
		return inst, fmt.Sprintf("instance %s stopped", name), err
	})
}

func instanceAttachDisk(ctx context.Context, args []string, env Env) error {
	fs, cf := newClientFlags("instance attach-disk", env)
	var req types.DiskRequest
	fs.StringVar(&req.Tag, "tag", "", "device role tag the guest sees")
	fs.StringVar(&req.Bus, "bus", "virtio", "bus: virtio, scsi, sata or usb")
	fs.StringVar(&req.Size, "size", types.DefaultDiskSize, "size of the new blank disk (qemu-img syntax)")
	fs.StringVar(&req.Serial, "serial", "", "disk serial")
	fs.StringVar(&req.Target, "target", "", "target name (vdX, sdX); the first free one on the bus by default")
	affectFlags(fs, &req.Affect)
	return withInstance(ctx, fs, cf, args, env, "instance attach-disk", func(c *client.Client, name string) (*types.Instance, string, error) {
		inst, err := c.AttachDisk(ctx, name, req)
		return inst, fmt.Sprintf("disk attached to %s", name), err
	})
}

func instanceDetachDisk(ctx context.Context, args []string, env Env) error {
	fs, cf := newClientFlags("instance detach-disk", env)
	var req types.DetachRequest
	fs.StringVar(&req.Tag, "tag", "", "the disk's tag")
	fs.StringVar(&req.Target, "target", "", "the disk's target name (instead of --tag)")
	affectFlags(fs, &req.Affect)
	return withInstance(ctx, fs, cf, args, env, "instance detach-disk", func(c *client.Client, name string) (*types.Instance, string, error) {
		if (req.Tag == "") == (req.Target == "") {
			return nil, "", fmt.Errorf("%w: instance detach-disk needs exactly one of --tag or --target", errUsage)
		}
		inst, err := c.DetachDisk(ctx, name, req)
		return inst, fmt.Sprintf("disk detached from %s", name), err
	})
}

func instanceAttachNIC(ctx context.Context, args []string, env Env) error {
	fs, cf := newClientFlags("instance attach-nic", env)
	var req types.NICRequest
	fs.StringVar(&req.Tag, "tag", "", "device role tag the guest sees")
	fs.StringVar(&req.MAC, "mac", "", "MAC address (generated when empty)")
	fs.StringVar(&req.Network, "network", "", "libvirt network (the daemon's default network when empty)")
	affectFlags(fs, &req.Affect)
	return withInstance(ctx, fs, cf, args, env, "instance attach-nic", func(c *client.Client, name string) (*types.Instance, string, error) {
		inst, err := c.AttachNIC(ctx, name, req)
		return inst, fmt.Sprintf("NIC attached to %s", name), err
	})
}

func instanceDetachNIC(ctx context.Context, args []string, env Env) error {
	fs, cf := newClientFlags("instance detach-nic", env)
	var req types.DetachRequest
	fs.StringVar(&req.Tag, "tag", "", "the NIC's tag")
	fs.StringVar(&req.MAC, "mac", "", "the NIC's MAC (instead of --tag)")
	affectFlags(fs, &req.Affect)
	return withInstance(ctx, fs, cf, args, env, "instance detach-nic", func(c *client.Client, name string) (*types.Instance, string, error) {
		if (req.Tag == "") == (req.MAC == "") {
			return nil, "", fmt.Errorf("%w: instance detach-nic needs exactly one of --tag or --mac", errUsage)
		}
		inst, err := c.DetachNIC(ctx, name, req)
		return inst, fmt.Sprintf("NIC detached from %s", name), err
	})
}

// withInstance parses a one-instance command, runs op against the daemon
// and prints the instance it returns (JSON, or a summary line, the
// warnings and the device table).
func withInstance(ctx context.Context, fs *flag.FlagSet, cf *clientFlags, args []string, env Env, cmd string,
	op func(c *client.Client, name string) (*types.Instance, string, error)) error {
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	name, err := oneName(cmd, pos)
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	inst, summary, err := op(c, name)
	if err != nil {
		return err
	}
	if cf.output == "json" {
		return writeJSON(env.Stdout, inst)
	}
	fmt.Fprintf(env.Stdout, "%s (state %s, revision %d)\n", summary, orDash(inst.State), inst.Revision)
	for _, w := range inst.Warnings {
		fmt.Fprintf(env.Stdout, "warning: %s\n", w)
	}
	fmt.Fprintln(env.Stdout)
	return printDevices(env, inst)
}
