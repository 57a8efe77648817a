// Package cli implements the hostctl command line: `hostctl serve` (the
// daemon) and the client commands that talk to it over the admin socket.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/internal/version"
)

// Defaults shared by the daemon and the clients.
const (
	DefaultDataDir = "/var/lib/vmeta"
	// DefaultMetadataListen is Nova's metadata port on loopback; a real
	// host puts the service behind 169.254.169.254 (see the README).
	DefaultMetadataListen = "127.0.0.1:8775"
)

// DefaultSocket is the admin socket path; VMETA_SOCKET overrides it for
// both the daemon and the clients.
func DefaultSocket() string {
	if s := os.Getenv("VMETA_SOCKET"); s != "" {
		return s
	}
	return "/run/vmeta/hostctl.sock"
}

// Env is what a command may touch.
type Env struct {
	Stdout, Stderr io.Writer
	Stdin          io.Reader
}

const usage = `hostctl — the vmeta host controller

Usage:
  hostctl serve [flags]                          run the daemon
  hostctl instance apply -f SPEC.yaml            create or update an instance
  hostctl instance list                          list instances
  hostctl instance show NAME                     show one instance
  hostctl instance delete NAME                   delete an instance
` + virtUsage + `  hostctl configdrive build NAME -o FILE         write an instance's config drive
  hostctl token new --name N --role admin|member [--project P]
                                                 make an admin API token
  hostctl version                                print the version (git describe of the build)

Client flags: --socket PATH (default $VMETA_SOCKET or /run/vmeta/hostctl.sock),
              --api URL (the daemon's TCP admin listener; default $VMETA_API)
                with the bearer token in $VMETA_TOKEN,
              --output table|json
Run 'hostctl serve -h' for the daemon's flags.
`

// errUsage marks errors that should print the usage text.
var errUsage = errors.New("usage")

// Run runs hostctl with args (without the program name) and returns the
// process exit status.
func Run(ctx context.Context, args []string, env Env) int {
	err := run(ctx, args, env)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(env.Stderr, "hostctl: %v\n\n%s", err, usage)
		return 2
	default:
		printError(env.Stderr, err)
		return 1
	}
}

func run(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command", errUsage)
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], env)
	case "instance":
		if len(args) < 2 {
			return fmt.Errorf("%w: instance needs a subcommand", errUsage)
		}
		switch args[1] {
		case "apply":
			return instanceApply(ctx, args[2:], env)
		case "list":
			return instanceList(ctx, args[2:], env)
		case "show":
			return instanceShow(ctx, args[2:], env)
		case "delete":
			return instanceDelete(ctx, args[2:], env)
		}
		if f, ok := virtCommands[args[1]]; ok {
			return f(ctx, args[2:], env)
		}
		return fmt.Errorf("%w: unknown instance subcommand %q", errUsage, args[1])
	case "network":
		if len(args) < 2 || args[1] != "setup-metadata" {
			return fmt.Errorf("%w: network needs the subcommand setup-metadata", errUsage)
		}
		return networkSetupMetadata(ctx, args[2:], env)
	case "configdrive":
		if len(args) < 2 || args[1] != "build" {
			return fmt.Errorf("%w: configdrive needs the subcommand build", errUsage)
		}
		return configDriveBuild(ctx, args[2:], env)
	case "token":
		if len(args) < 2 || args[1] != "new" {
			return fmt.Errorf("%w: token needs the subcommand new", errUsage)
		}
		return tokenNew(args[2:], env)
	case "version":
		fmt.Fprintln(env.Stdout, version.String())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(env.Stdout, usage)
		return nil
	}
	return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
}

// printError prints an error; a spec error lists one field per line.
func printError(w io.Writer, err error) {
	var ae *api.Error
	if errors.As(err, &ae) && len(ae.Fields) > 0 {
		fmt.Fprintln(w, "hostctl: invalid instance spec:")
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

// clientFlags are the flags every client command takes.
type clientFlags struct {
	socket string
	api    string
	output string
}

func newClientFlags(name string, env Env) (*flag.FlagSet, *clientFlags) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	cf := &clientFlags{}
	fs.StringVar(&cf.socket, "socket", DefaultSocket(), "admin API socket of the hostctl daemon")
	fs.StringVar(&cf.api, "api", os.Getenv("VMETA_API"), "URL of the daemon's TCP admin listener (token in $VMETA_TOKEN); overrides --socket")
	fs.StringVar(&cf.output, "output", "table", "output format: table or json")
	return fs, cf
}

func (cf *clientFlags) client() (*api.Client, error) {
	switch cf.output {
	case "table", "json":
	default:
		return nil, fmt.Errorf("%w: --output %q: must be table or json", errUsage, cf.output)
	}
	if cf.api != "" {
		tok := os.Getenv("VMETA_TOKEN")
		if tok == "" {
			return nil, fmt.Errorf("%w: --api needs a bearer token in $VMETA_TOKEN", errUsage)
		}
		return api.NewTCPClient(cf.api, tok), nil
	}
	return api.NewUnixClient(cf.socket), nil
}

// tokenNew prints a fresh admin API token and the line to add to the
// daemon's tokens file (which keeps only the token's hash).
func tokenNew(args []string, env Env) error {
	fs := flag.NewFlagSet("token new", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	name := fs.String("name", "", "who the token is for")
	role := fs.String("role", api.RoleMember, "admin or member")
	project := fs.String("project", "", "the project a member token is scoped to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tok, entry, err := api.NewToken(*name, *role, *project)
	if err != nil {
		return err
	}
	b, err := json.Marshal(entry)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "token (shown once; give it to %s): %s\n", *name, tok)
	fmt.Fprintf(env.Stdout, "add to the tokens file (a JSON list) of `hostctl serve --admin-tokens-file`:\n  %s\n", b)
	return nil
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

func oneName(cmd string, pos []string) (string, error) {
	if len(pos) != 1 || strings.TrimSpace(pos[0]) == "" {
		return "", fmt.Errorf("%w: %s takes exactly one instance name", errUsage, cmd)
	}
	return pos[0], nil
}
