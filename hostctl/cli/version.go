package cli

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/internal/version"
)

// versionCommand is `hostctl version`: the build's version (git describe
// of its commit, set by make build and make package).
func versionCommand() *Command {
	return &Command{Name: "version", Summary: "print hostctl's version", Setup: noFlags(func(_ context.Context, c *Call) error {
		if err := c.NoArgs(); err != nil {
			return err
		}
		fmt.Fprintln(c.Stdout, version.String())
		return nil
	})}
}
