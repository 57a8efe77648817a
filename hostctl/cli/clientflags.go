package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/vmeta/vmeta/hostctl/api/client"
)

// Environment variables of the client flags.
const (
	// APIEnv is the default of --api.
	APIEnv = "VMETA_API"
	// TokenEnv holds the bearer token of --api (never a flag: a token on
	// the command line would show in ps and the shell's history).
	TokenEnv = "VMETA_TOKEN"
)

// clientFlags are the flags every client command takes.
type clientFlags struct {
	socket string
	api    string
	output string
}

func addClientFlags(fs *flag.FlagSet) *clientFlags {
	cf := &clientFlags{}
	fs.StringVar(&cf.socket, "socket", client.DefaultSocket(), "admin API socket of the hostctl daemon")
	fs.StringVar(&cf.api, "api", os.Getenv(APIEnv), "URL of the daemon's TCP admin listener (token in $"+TokenEnv+"); overrides --socket")
	fs.StringVar(&cf.output, "output", "table", "output format: table or json")
	return cf
}

func (cf *clientFlags) check() error {
	switch cf.output {
	case "table", "json":
	default:
		return Usagef("--output %q: must be table or json", cf.output)
	}
	if cf.api != "" && os.Getenv(TokenEnv) == "" {
		return Usagef("--api needs a bearer token in $%s", TokenEnv)
	}
	return nil
}

// Client returns the daemon's client the client flags name.
func (c *Call) Client() *client.Client {
	if c.client.api != "" {
		return client.NewTCP(c.client.api, os.Getenv(TokenEnv))
	}
	return client.NewUnix(c.client.socket)
}

// JSON reports whether the output is JSON (--output json).
func (c *Call) JSON() bool { return c.client != nil && c.client.output == "json" }

// PrintJSON writes v as indented JSON.
func (c *Call) PrintJSON(v any) error { return writeJSON(c.Stdout, v) }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}
