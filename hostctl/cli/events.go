package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// eventCommands are `hostctl events list|follow`: the audit streams
// (shares, devices) other tools follow.
func eventCommands() []*Command {
	return []*Command{
		{Name: "events list", Args: "STREAM [--after ID] [--limit N]", Summary: "print an audit stream's events (shares, devices) and exit", Client: true,
			Setup: func(fs *flag.FlagSet) func(context.Context, *Call) error {
				after := fs.String("after", "", "start after the event with this ID")
				limit := fs.Int("limit", 100, "at most this many events")
				return func(ctx context.Context, c *Call) error {
					stream, err := c.OneName()
					if err != nil {
						return err
					}
					evs, err := c.Client().Events(ctx, stream, *after, *limit, 0)
					if err != nil {
						return err
					}
					if c.JSON() {
						return c.PrintJSON(evs)
					}
					for _, ev := range evs {
						printEvent(c, ev)
					}
					return nil
				}
			}},
		{Name: "events follow", Args: "STREAM [--after ID]", Summary: "print an audit stream's events as they come, until interrupted", Client: true,
			Help: "With --output json, one JSON object per line (the form a listener reads).",
			Setup: func(fs *flag.FlagSet) func(context.Context, *Call) error {
				after := fs.String("after", "", "start after the event with this ID (default: from the first)")
				return func(ctx context.Context, c *Call) error {
					stream, err := c.OneName()
					if err != nil {
						return err
					}
					return c.Client().Follow(ctx, stream, *after, func(ev types.Event) error {
						if c.JSON() {
							b, err := json.Marshal(ev)
							if err != nil {
								return err
							}
							_, err = fmt.Fprintf(c.Stdout, "%s\n", b)
							return err
						}
						printEvent(c, ev)
						return nil
					})
				}
			}},
	}
}

func printEvent(c *Call, ev types.Event) {
	fmt.Fprintf(c.Stdout, "%s  %s  %s  %s  %s\n", ev.ID, ev.Time.UTC().Format(time.RFC3339), ev.Host, ev.Type, ev.Payload)
}
