package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// hostCommands are `hostctl host list|show`.
func hostCommands() []*Command {
	return []*Command{
		{Name: "host list", Summary: "list the hosts sharing the store, with a down mark after their heartbeat went silent", Client: true, Setup: noFlags(hostList)},
		{Name: "host show", Args: "NAME", Summary: "show one host's heartbeat", Client: true, Setup: noFlags(hostShow)},
	}
}

func hostList(ctx context.Context, c *Call) error {
	if err := c.NoArgs(); err != nil {
		return err
	}
	hs, err := c.Client().Hosts(ctx)
	if err != nil {
		return err
	}
	return printList(c, hs, "HOST\tSTATUS\tINSTANCES\tLAST SEEN\tSTARTED\tVERSION", hs, func(h types.HostStatus) string {
		return fmt.Sprintf("%s\t%s\t%d\t%s ago\t%s\t%s", h.Host, hostStatus(h), h.Instances,
			age(h.AgeSeconds), h.Started.UTC().Format(time.RFC3339), orDash(h.Version))
	})
}

func hostShow(ctx context.Context, c *Call) error {
	name, err := c.OneName()
	if err != nil {
		return err
	}
	hs, err := c.Client().Hosts(ctx)
	if err != nil {
		return err
	}
	for _, h := range hs {
		if h.Host != name {
			continue
		}
		return printFields(c, h, [][2]string{
			{"Host", h.Host}, {"Status", hostStatus(h)}, {"Instances", fmt.Sprint(h.Instances)},
			{"Last seen", h.LastSeen.UTC().Format(time.RFC3339Nano) + " (" + age(h.AgeSeconds) + " ago)"},
			{"Started", h.Started.UTC().Format(time.RFC3339)}, {"Version", orDash(h.Version)},
			{"Traits", orDash(strings.Join(h.Traits, " "))},
		})
	}
	return fmt.Errorf("host %s: no heartbeat on record (hosts appear once their hostctl serve has started)", name)
}

func hostStatus(h types.HostStatus) string {
	switch {
	case h.Stopped:
		return "down (stopped)"
	case h.Down:
		return "down"
	}
	return "up"
}

func age(seconds float64) string {
	return time.Duration(seconds * float64(time.Second)).Round(time.Second).String()
}
