// Package cli implements the hostctl command line: a table of commands
// (Command), each with its own flags, usage and --help, shell completion
// generated from the table, and the client commands that talk to a
// hostctl daemon through hostctl/api/client. It links neither the
// controller nor libvirt (deps_test.go): the daemon's own command, serve,
// lives in hostctl/cli/serve and is added to the table by the binary.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// Env is what a command may touch.
type Env struct {
	Stdout, Stderr io.Writer
	Stdin          io.Reader
}

// Command is one entry of the command table.
type Command struct {
	// Name is the command's words: "instance apply".
	Name string
	// Args is what follows the name in the usage line: "NAME -f SPEC".
	Args string
	// Summary is the one line the command list shows.
	Summary string
	// Help is more text for --help (optional).
	Help string
	// Client marks the commands that talk to the daemon: they take the
	// client flags (--socket, --api, --output), also before the command.
	Client bool
	// ConfigFile adds --config FILE: a YAML file with one key per flag,
	// which flags on the command line override (LoadConfigFile).
	ConfigFile bool
	// ConfigPath is where the packages install the ConfigFile command's
	// file (the FILES of its manual page, hostctl.yaml(5)).
	ConfigPath string
	// Setup registers the command's flags on fs and returns what runs it.
	Setup func(fs *flag.FlagSet) func(ctx context.Context, c *Call) error
}

// Call is one run of a command.
type Call struct {
	Env
	// Args are the positional arguments (flags may come before or after
	// them).
	Args []string
	// Flags is the command's parsed flag set.
	Flags *flag.FlagSet

	cmd    *Command
	client *clientFlags
}

// ErrUsage marks an error in how a command was called: it is printed with
// a hint to the command's --help, and the exit status is 2.
var ErrUsage = errors.New("usage")

type usageError struct{ err error }

func (e *usageError) Error() string        { return e.err.Error() }
func (e *usageError) Unwrap() error        { return e.err }
func (e *usageError) Is(target error) bool { return target == ErrUsage }

// Usagef returns a usage error (errors.Is(err, ErrUsage)) with the
// message, without a prefix.
func Usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// UsageError marks err as a usage error, keeping its message and chain.
func UsageError(err error) error { return &usageError{err: err} }

// Run runs hostctl with args (without the program name) and returns the
// process exit status. The table is Commands() and extra (the binary adds
// serve).
func Run(ctx context.Context, args []string, env Env, extra ...*Command) int {
	a := &app{cmds: append(Commands(), extra...)}
	a.cmds = append(a.cmds, a.helpCommand(), a.completionCommand(), a.manCommand())
	return a.run(ctx, args, env)
}

// Commands is the table of the client commands.
func Commands() []*Command {
	var cmds []*Command
	cmds = append(cmds, instanceCommands()...)
	cmds = append(cmds, powerCommands()...)
	cmds = append(cmds, hotplugCommands()...)
	cmds = append(cmds, hostCommands()...)
	cmds = append(cmds, secretCommands()...)
	cmds = append(cmds, shareCommands()...)
	cmds = append(cmds, resizeCommands()...)
	cmds = append(cmds, snapshotCommands()...)
	cmds = append(cmds, shelveCommands()...)
	cmds = append(cmds, flavorCommands()...)
	cmds = append(cmds, imageCommands()...)
	cmds = append(cmds, deviceCommands()...)
	cmds = append(cmds, eventCommands()...)
	cmds = append(cmds, keyCommands()...)
	cmds = append(cmds, configDriveCommand(), tokenNewCommand(), networkSetupMetadataCommand(), versionCommand())
	return cmds
}

type app struct {
	cmds []*Command
}

func (a *app) run(ctx context.Context, args []string, env Env) int {
	lead, rest, err := splitLeadingFlags(args)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hostctl: %v\nRun 'hostctl help' for the commands.\n", err)
		return 2
	}
	cmd, words := a.lookup(rest)
	if cmd == nil {
		return a.noCommand(env, lead, words, rest[len(words):])
	}
	err = a.runCommand(ctx, cmd, append(lead, rest[len(words):]...), env)
	if code, ok := interruptedExit(ctx, env, cmd.Name, err); ok {
		return code
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrUsage):
		fmt.Fprintf(env.Stderr, "hostctl %s: %v\nRun 'hostctl %s --help' for usage.\n", cmd.Name, err, cmd.Name)
		return 2
	default:
		printError(env.Stderr, err)
		return 1
	}
}

// lookup finds the command named by the longest run of leading words of
// args; it returns the words it took (all of them that name a group when
// no command matches).
func (a *app) lookup(args []string) (*Command, []string) {
	var found *Command
	var took []string
	for i := 1; i <= len(args); i++ {
		name := strings.Join(args[:i], " ")
		if strings.HasPrefix(args[i-1], "-") || !a.isPrefix(name) {
			break
		}
		took = args[:i]
		if c := a.find(name); c != nil {
			found = c
		}
	}
	if found != nil {
		return found, strings.Fields(found.Name)
	}
	return nil, took
}

func (a *app) find(name string) *Command {
	for _, c := range a.cmds {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// isPrefix reports whether name is a command or a group of commands.
func (a *app) isPrefix(name string) bool {
	return slices.ContainsFunc(a.cmds, func(c *Command) bool { return c.Name == name || strings.HasPrefix(c.Name, name+" ") })
}

// subcommands lists the words that may follow group ("" for the top).
func (a *app) subcommands(group string) []string {
	var out []string
	for _, c := range a.cmds {
		rest, ok := c.Name, group == ""
		if !ok {
			rest, ok = strings.CutPrefix(c.Name, group+" ")
		}
		if w, _, _ := strings.Cut(rest, " "); ok && !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

// noCommand answers args that name no command: the usage for none or
// --help, a short error and a hint otherwise.
func (a *app) noCommand(env Env, lead, group, rest []string) int {
	g := strings.Join(group, " ")
	help := slices.ContainsFunc(append(lead, rest...), isHelpFlag)
	switch {
	case help:
		a.printUsage(env.Stdout, g)
		return 0
	case len(group) == 0 && len(rest) == 0:
		fmt.Fprintln(env.Stderr, "hostctl: no command")
		a.printUsage(env.Stderr, "")
		return 2
	case len(rest) == 0 || strings.HasPrefix(rest[0], "-"):
		fmt.Fprintf(env.Stderr, "hostctl: %s needs a subcommand: %s\nRun 'hostctl %s --help' for usage.\n", g, strings.Join(a.subcommands(g), ", "), g)
	case g == "":
		fmt.Fprintf(env.Stderr, "hostctl: unknown command %q\nRun 'hostctl help' for the commands.\n", rest[0])
	default:
		fmt.Fprintf(env.Stderr, "hostctl: unknown command %q (%s takes %s)\nRun 'hostctl %s --help' for usage.\n", g+" "+rest[0], g, strings.Join(a.subcommands(g), ", "), g)
	}
	return 2
}

func isHelpFlag(s string) bool { return s == "-h" || s == "-help" || s == "--help" }

// flagSet builds a command's flag set: its own flags, the client flags
// for a client command, --config for one that takes a file.
func (a *app) flagSet(cmd *Command) (*flag.FlagSet, func(ctx context.Context, c *Call) error, *clientFlags, *string) {
	fs := flag.NewFlagSet(cmd.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, help printed by printHelp
	fs.Usage = func() {}
	var run func(ctx context.Context, c *Call) error
	if cmd.Setup != nil {
		run = cmd.Setup(fs)
	}
	var cf *clientFlags
	if cmd.Client {
		cf = addClientFlags(fs)
	}
	var config *string
	if cmd.ConfigFile {
		config = fs.String(configFlag, "", "YAML file with one key per flag (the flag's name); flags on the command line override it")
	}
	return fs, run, cf, config
}

func (a *app) runCommand(ctx context.Context, cmd *Command, args []string, env Env) error {
	fs, run, cf, config := a.flagSet(cmd)
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		a.printHelp(env.Stdout, cmd, fs)
		return nil
	}
	if err != nil {
		return UsageError(err)
	}
	if config != nil && *config != "" {
		if err := loadConfigFile(ctx, fs, *config); err != nil {
			return UsageError(err)
		}
	}
	if cf != nil {
		if err := cf.check(); err != nil {
			return err
		}
	}
	return run(ctx, &Call{Env: env, Args: pos, Flags: fs, cmd: cmd, client: cf})
}

// printUsage prints the commands of group ("" for all).
func (a *app) printUsage(w io.Writer, group string) {
	fmt.Fprintln(w, "hostctl — the vmeta host controller")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage:")
	var lines [][2]string
	for _, c := range a.cmds {
		if group != "" && c.Name != group && !strings.HasPrefix(c.Name, group+" ") {
			continue
		}
		l := strings.TrimSpace("hostctl " + c.Name + " " + c.Args)
		lines = append(lines, [2]string{l, c.Summary})
	}
	for _, l := range lines {
		if len(l[0]) > 48 {
			fmt.Fprintf(w, "  %s\n  %-48s %s\n", l[0], "", l[1])
		} else {
			fmt.Fprintf(w, "  %-48s %s\n", l[0], l[1])
		}
	}
	fmt.Fprint(w, `
Client flags (before or after the command):
  --socket PATH   the daemon's admin socket (default $VMETA_SOCKET or /run/vmeta/hostctl.sock)
  --api URL       the daemon's TCP admin listener (default $VMETA_API), with the
                  bearer token in $VMETA_TOKEN
  --output FMT    table or json
Run 'hostctl COMMAND --help' for a command's flags.
`)
}

// printHelp prints one command's usage and flags.
func (a *app) printHelp(w io.Writer, cmd *Command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s [flags]\n\n%s\n", strings.TrimSpace("hostctl "+cmd.Name+" "+cmd.Args), cmd.Summary)
	if cmd.Help != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(cmd.Help))
	}
	fmt.Fprintln(w, "\nFlags:")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// helpCommand is `hostctl help [COMMAND...]`.
func (a *app) helpCommand() *Command {
	return &Command{Name: "help", Args: "[COMMAND]", Summary: "show the commands, or one command's usage and flags",
		Setup: func(fs *flag.FlagSet) func(context.Context, *Call) error {
			return func(ctx context.Context, c *Call) error {
				cmd, words := a.lookup(c.Args)
				if len(words) != len(c.Args) {
					return Usagef("unknown command %q", strings.Join(c.Args, " "))
				}
				if cmd == nil {
					a.printUsage(c.Stdout, strings.Join(words, " "))
					return nil
				}
				fs, _, _, _ := a.flagSet(cmd)
				a.printHelp(c.Stdout, cmd, fs)
				return nil
			}
		}}
}

// splitLeadingFlags takes the client flags (and --help) that come before
// the command, as in `hostctl --api URL instance list`, and returns them
// apart from the rest.
func splitLeadingFlags(args []string) (lead, rest []string, err error) {
	fs := flag.NewFlagSet("hostctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	addClientFlags(fs)
	fs.Bool("h", false, "")
	fs.Bool("help", false, "")
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	rest = fs.Args()
	lead = slices.Clone(args[:len(args)-len(rest)])
	if len(lead) > 0 && lead[len(lead)-1] == "--" {
		lead = lead[:len(lead)-1]
	}
	return lead, rest, nil
}

// printError prints an error; a refusal naming fields is headed by what
// was refused (the daemon's summary: "invalid flavor", "invalid instance
// spec"…), then lists one field per line.
func printError(w io.Writer, err error) {
	var ae *types.Error
	if errors.As(err, &ae) && len(ae.Fields) > 0 {
		heading := ae.Summary
		if heading == "" { // a daemon from before summaries
			heading = "invalid request"
		}
		fmt.Fprintf(w, "hostctl: %s:\n", heading)
		for _, f := range ae.Fields {
			if f.Value != nil {
				fmt.Fprintf(w, "  %s: %s: %s\n", f.Field, quote(f.Value), f.Rule)
			} else {
				fmt.Fprintf(w, "  %s: %s\n", f.Field, f.Rule)
			}
		}
		return
	}
	fmt.Fprintf(w, "hostctl: %v\n", err)
}

func quote(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprint(v)
}

// parseInterspersed parses flags that may follow positional arguments
// ("show NAME --output json") and returns the positionals.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// OneName returns the one instance name a command takes.
func (c *Call) OneName() (string, error) {
	if len(c.Args) != 1 || strings.TrimSpace(c.Args[0]) == "" {
		return "", Usagef("%s takes exactly one instance name", c.cmd.Name)
	}
	return c.Args[0], nil
}

// NoArgs refuses positional arguments.
func (c *Call) NoArgs() error {
	if len(c.Args) != 0 {
		return Usagef("%s takes no arguments", c.cmd.Name)
	}
	return nil
}
