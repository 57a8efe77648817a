package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/api/auth"
	"github.com/vmeta/vmeta/hostctl/api/types"
)

// tokenNewCommand is `hostctl token new`: it prints a fresh admin API
// token and the line to add to the daemon's tokens file (which keeps only
// the token's hash).
func tokenNewCommand() *Command {
	return &Command{Name: "token new", Args: "--name N --role admin|member [--project P]", Summary: "make an admin API token",
		Setup: func(fs *flag.FlagSet) func(context.Context, *Call) error {
			name := fs.String("name", "", "who the token is for")
			role := fs.String("role", types.RoleMember, "admin or member")
			project := fs.String("project", "", "the project a member token is scoped to")
			return func(ctx context.Context, c *Call) error {
				if err := c.NoArgs(); err != nil {
					return err
				}
				tok, entry, err := auth.NewToken(*name, *role, *project)
				if err != nil {
					return err
				}
				b, err := json.Marshal(entry)
				if err != nil {
					return fmt.Errorf("encode token entry: %w", err)
				}
				fmt.Fprintf(c.Stdout, "token (shown once; give it to %s): %s\n", *name, tok)
				fmt.Fprintf(c.Stdout, "add to the tokens file (a JSON list) of `hostctl serve --admin-tokens-file`:\n  %s\n", b)
				return nil
			}
		}}
}
