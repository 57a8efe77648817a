// Command hostctl is the vmeta host controller: `hostctl serve` runs the
// daemon, the other subcommands are its clients.
package main

import (
	"context"
	"os"

	"github.com/vmeta/vmeta/hostctl/cli"
	"github.com/vmeta/vmeta/hostctl/cli/serve"
)

func main() {
	// SIGINT and SIGTERM stop every command: the context reaches its
	// reads and the daemon's client; a stopped client command exits 130
	// or 143, serve shuts down and exits 0.
	ctx, stop := cli.SignalContext(context.Background())
	code := cli.Run(ctx, os.Args[1:], cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Stdin: os.Stdin}, serve.Command())
	stop()
	os.Exit(code)
}
