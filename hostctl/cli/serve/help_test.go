package serve

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/cli"
	"github.com/vmeta/vmeta/hostctl/daemon"
)

// flagLine is a flag's first line in Go's flag help: "  -name" and,
// unless the flag is a boolean, the name of its argument.
var flagLine = regexp.MustCompile(`^  -(\S+)(?: (.*))?$`)

// argNames are the argument names Go's flag package prints for a flag
// whose usage names none (a `backquoted` word in a usage string becomes
// the argument's name instead, which is never what vmeta means).
var argNames = []string{"string", "int", "uint", "int64", "uint64", "float", "duration", "value"}

// TestHelpFlagArguments renders the --help of every hostctl command,
// serve included, and checks each flag's line: the argument name is the
// flag's type, never a word of its usage text ("-key-rotation hostctl
// keys policy" was printed where a usage string held `hostctl keys
// policy`), and no usage text keeps a backquote.
func TestHelpFlagArguments(t *testing.T) {
	cmds := append(cli.Commands(), Command())
	flags := 0
	for _, c := range cmds {
		var out, errOut bytes.Buffer
		code := cli.Run(context.Background(), append(strings.Fields(c.Name), "--help"), cli.Env{Stdout: &out, Stderr: &errOut, Stdin: strings.NewReader("")}, Command())
		if code != 0 {
			t.Errorf("%s --help: exit %d: %s", c.Name, code, errOut.String())
			continue
		}
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(line, "    \t") && strings.Contains(line, "`") {
				t.Errorf("hostctl %s --help: a flag's usage keeps a backquote: %s", c.Name, line)
			}
			m := flagLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			flags++
			if m[2] != "" && !slices.Contains(argNames, m[2]) {
				t.Errorf("hostctl %s --help: flag -%s shows the argument name %q (a backquoted word of its usage)", c.Name, m[1], m[2])
			}
		}
	}
	if flags < 100 {
		t.Errorf("only %d flag lines found in the help of %d commands: the help's format changed?", flags, len(cmds))
	}
}

// TestServeHelpTokenKeyDefault: the token key lives in the data
// directory wherever --data-dir puts it (Setup sets it after parsing), so
// the help names DATA-DIR, not the default directory.
func TestServeHelpTokenKeyDefault(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := cli.Run(context.Background(), []string{"serve", "--help"}, cli.Env{Stdout: &out, Stderr: &errOut, Stdin: strings.NewReader("")}, Command()); code != 0 {
		t.Fatalf("serve --help: exit %d: %s", code, errOut.String())
	}
	help := out.String()
	_, block, ok := strings.Cut(help, "  -metadata-token-key-file")
	if !ok {
		t.Fatalf("no -metadata-token-key-file in:\n%s", help)
	}
	if i := strings.Index(block, "\n  -"); i >= 0 {
		block = block[:i]
	}
	if want := "DATA-DIR/" + daemon.TokenKeyFile; !strings.Contains(block, want) {
		t.Errorf("-metadata-token-key-file help does not name %s:%s", want, block)
	}
	if strings.Contains(block, daemon.DefaultDataDir) {
		t.Errorf("-metadata-token-key-file help names %s, where the key is in --data-dir:%s", daemon.DefaultDataDir, block)
	}
}
