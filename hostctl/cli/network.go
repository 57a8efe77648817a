package cli

import (
	"context"
	"errors"
	"flag"

	"github.com/vmeta/vmeta/hostctl/hostnet"
)

// networkSetupMetadataCommand is `hostctl network setup-metadata`; the
// host changes themselves are hostnet's.
func networkSetupMetadataCommand() *Command {
	return &Command{Name: "network setup-metadata", Args: "[--mode dnat|address] [--bridge virbr0]",
		Summary: "let guests reach 169.254.169.254:80",
		Help: `dnat (default): an iptables DNAT rule sends guests' TCP to 169.254.169.254:80
to the metadata listener on the bridge's address (--to). address: puts
169.254.169.254/32 on the bridge; the service then listens there on port 80.
Each step checks before it changes anything; --remove undoes the setup.`,
		Setup: func(fs *flag.FlagSet) func(context.Context, *Call) error {
			s := &hostnet.MetadataSetup{}
			fs.StringVar(&s.Mode, "mode", "dnat", "dnat (an iptables DNAT rule to the listener on the bridge address) or address (169.254.169.254 on the bridge)")
			fs.StringVar(&s.Bridge, "bridge", "virbr0", "the libvirt network's bridge the guests are on")
			fs.StringVar(&s.To, "to", "", "dnat mode: the metadata listener, ADDR:PORT (default <bridge IPv4>:8775)")
			fs.BoolVar(&s.DryRun, "dry-run", false, "print the commands that would change the host, change nothing")
			fs.BoolVar(&s.Remove, "remove", false, "undo the setup")
			return func(ctx context.Context, c *Call) error {
				if err := c.NoArgs(); err != nil {
					return err
				}
				err := s.Apply(ctx, c.Stdout, c.Stderr)
				if errors.Is(err, hostnet.ErrInvalid) {
					return UsageError(err)
				}
				return err
			}
		}}
}
