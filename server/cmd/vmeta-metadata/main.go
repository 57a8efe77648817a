// Command vmeta-metadata is a metadata service replica: it serves the
// guest metadata hostctl publishes to a shared store (Redis), with no host
// controller on its machine. See package replica.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/vmeta/vmeta/server/replica"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := replica.Run(ctx, os.Args[1:], replica.Env{Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
