package cli

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// migrateCommands are `hostctl instance migrate|confirm-migration|
// revert-migration|migration` (issue 24: cold migration).
func migrateCommands() []*Command {
	return []*Command{
		{Name: "instance migrate", Args: "NAME --to HOST", Client: true, Setup: instanceMigrate,
			Summary: "move an instance to another host of the store (cold: stopped, disks copied, started there; then confirm or revert)",
			Help: "The instance is stopped, its disk files (a LUKS disk's ciphertext, never its plaintext) and\n" +
				"its secrets go to HOST over the host-to-host channel (mutual TLS), HOST takes the instance\n" +
				"over, defines its domain and starts it when it ran here. The move then waits in state verify:\n" +
				"`instance confirm-migration NAME` removes what this host still holds of it, `instance\n" +
				"revert-migration NAME` brings it back. A move that stopped on the way (state migrating) is\n" +
				"resumed by the same command, or undone by revert-migration. Administrators only; run it on\n" +
				"the host the instance lives on."},
		{Name: "instance confirm-migration", Args: "NAME", Summary: "end a move in verify: the source's disks, domain and secrets' copies go", Client: true, Setup: noFlags(instanceConfirmMigration)},
		{Name: "instance revert-migration", Args: "NAME", Summary: "end a move the other way: the destination's copy goes, the instance runs on its source again", Client: true, Setup: noFlags(instanceRevertMigration)},
		{Name: "instance migration", Args: "NAME", Summary: "show the move of an instance (state, step, error, bytes copied)", Client: true, Setup: noFlags(instanceMigration)},
	}
}

func instanceMigrate(fs *flag.FlagSet) func(context.Context, *Call) error {
	to := fs.String("to", "", "the destination host (required)")
	timeout := fs.Duration("timeout", 0, "how long a running guest has to shut down before its domain is powered off (default 30s)")
	quiet := fs.Bool("quiet", false, "print no progress of the disk copy on standard error")
	live := fs.Bool("live", false, "migrate the running instance live through libvirt (it keeps running; no verify: the move ends once the source's copy is gone)")
	return func(ctx context.Context, c *Call) error {
		name, err := c.OneName()
		if err != nil {
			return err
		}
		if *to == "" {
			return Usagef("instance migrate needs --to HOST")
		}
		stop := func() {}
		if !*quiet && !c.JSON() && !*live {
			stop = copyProgress(ctx, c, name)
		}
		m, err := c.Client().MigrateWith(ctx, name, types.MigrateRequest{Host: *to, TimeoutSeconds: timeout.Seconds(), Live: *live})
		stop()
		if err != nil {
			return err
		}
		if *live {
			return printMigration(c, m, liveMigrated(name, *to, m))
		}
		return printMigration(c, m, fmt.Sprintf("instance %s is on %s, in verify: confirm-migration or revert-migration ends the move", name, m.Dest))
	}
}

func instanceConfirmMigration(ctx context.Context, c *Call) error {
	name, err := c.OneName()
	if err != nil {
		return err
	}
	m, err := c.Client().ConfirmMigration(ctx, name)
	if err != nil {
		return err
	}
	return printMigration(c, m, fmt.Sprintf("move of %s confirmed: it lives on %s", name, m.Dest))
}

func instanceRevertMigration(ctx context.Context, c *Call) error {
	name, err := c.OneName()
	if err != nil {
		return err
	}
	m, err := c.Client().RevertMigration(ctx, name)
	if err != nil {
		return err
	}
	return printMigration(c, m, fmt.Sprintf("move of %s reverted: it lives on %s again", name, m.Source))
}

func instanceMigration(ctx context.Context, c *Call) error {
	name, err := c.OneName()
	if err != nil {
		return err
	}
	m, err := c.Client().Migration(ctx, name)
	if err != nil {
		return err
	}
	return printMigration(c, m, "")
}

func printMigration(c *Call, m types.Migration, done string) error {
	if c.JSON() {
		return c.PrintJSON(m)
	}
	if done != "" {
		fmt.Fprintln(c.Stdout, done)
	}
	if m.State == "" {
		return nil
	}
	fmt.Fprintf(c.Stdout, "move:     %s -> %s\nstate:    %s (step %s)\n", m.Source, m.Dest, m.State, m.Step)
	if m.Error != "" {
		fmt.Fprintf(c.Stdout, "error:    %s\n", m.Error)
	}
	fmt.Fprintf(c.Stdout, "copied:   %d bytes in %.1f s\n", m.Bytes, m.CopySeconds)
	return nil
}

// copyProgress prints, every second on standard error, how much of the
// move's disks was copied, until stop is called.
func copyProgress(ctx context.Context, c *Call, name string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last := int64(-1)
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			m, err := c.Client().Migration(ctx, name)
			if err != nil || m.State != "migrating" || m.Bytes == last {
				continue
			}
			last = m.Bytes
			var total int64
			for _, d := range m.Disks {
				if d.Size > 0 {
					total += d.Size
				}
			}
			fmt.Fprintf(c.Stderr, "%s: step %s, %d of %d MiB of disk copied\n", name, m.Step, m.Bytes>>20, total>>20)
		}
	}()
	return func() { cancel(); <-done }
}
