// Command hostctl is the vmeta host controller: `hostctl serve` runs the
// daemon, the other subcommands are its clients.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/vmeta/vmeta/hostctl/cli"
	"github.com/vmeta/vmeta/hostctl/cli/serve"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Stdin: os.Stdin}, serve.Command())
	stop()
	os.Exit(code)
}
