// Package serve is the `hostctl serve` command: it parses the daemon's
// flags, and a configuration file of the same keys (--config), into a
// daemon.Config and runs the daemon. It is apart from hostctl/cli so that
// the client commands do not link the controller or libvirt.
package serve

import (
	"context"
	"errors"
	"flag"

	"github.com/vmeta/vmeta/hostctl/cli"
	"github.com/vmeta/vmeta/hostctl/daemon"
)

// DefaultConfigFile is where a host package puts the configuration file;
// hostctl reads it only when --config names it.
const DefaultConfigFile = "/etc/vmeta/hostctl.yaml"

// Command is `hostctl serve`.
func Command() *cli.Command {
	return &cli.Command{Name: "serve", Args: "[--config " + DefaultConfigFile + "]", Summary: "run the daemon",
		Help: `Runs the controller, the admin API (unix socket, and a TCP listener with
--admin-listen) and the metadata service. Every flag may also be given in the
--config file, keyed by the flag's name; the command line overrides the file.`,
		ConfigFile: true, ConfigPath: DefaultConfigFile,
		Setup: func(fs *flag.FlagSet) func(context.Context, *cli.Call) error {
			var cfg daemon.Config
			cfg.AddFlags(fs)
			return func(ctx context.Context, c *cli.Call) error {
				if err := c.NoArgs(); err != nil {
					return err
				}
				keyFileSet := false
				c.Flags.Visit(func(f *flag.Flag) { keyFileSet = keyFileSet || f.Name == "metadata-token-key-file" })
				if !keyFileSet {
					// The token key lives in the data directory, wherever
					// that is.
					cfg.Metadata.TokenKeyFile = daemon.TokenKeyFilePath(cfg.DataDir)
				}
				cfg.Stdout, cfg.Stderr = c.Stdout, c.Stderr
				err := daemon.Run(ctx, cfg)
				if errors.Is(err, daemon.ErrConfig) {
					return cli.UsageError(err)
				}
				return err
			}
		}}
}
