package cli_test

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/cli"
	"github.com/vmeta/vmeta/hostctl/cli/serve"
	"github.com/vmeta/vmeta/internal/manpage"
	"github.com/vmeta/vmeta/internal/manpage/mantest"
)

// manPage runs `hostctl man PAGE` with the table of the binary (the client
// commands, serve) and extra commands, and returns the page as man renders
// it.
func manPage(t *testing.T, page string, extra ...*cli.Command) string {
	t.Helper()
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	var out, errOut bytes.Buffer
	args := []string{"man"}
	if page != "" {
		args = append(args, page)
	}
	code := cli.Run(context.Background(), args, cli.Env{Stdout: &out, Stderr: &errOut, Stdin: strings.NewReader("")}, append([]*cli.Command{serve.Command()}, extra...)...)
	if code != 0 || errOut.Len() > 0 {
		t.Fatalf("hostctl man %s: exit %d: %s", page, code, errOut.String())
	}
	name := "hostctl.1"
	if page == cli.PageConfig {
		name = "hostctl.yaml.5"
	}
	return mantest.Render(t, name, out.Bytes())
}

// commandSections cuts hostctl(1) as man prints it into the text under
// each command's heading ("   hostctl NAME ARGS"), by command name.
func commandSections(t *testing.T, page string, cmds []*cli.Command) map[string]string {
	t.Helper()
	start, end := strings.Index(page, "\nCOMMANDS\n"), strings.Index(page, "\nCLIENT FLAGS\n")
	if start < 0 || end < start {
		t.Fatalf("no COMMANDS section before CLIENT FLAGS:\n%s", page)
	}
	body := page[start:end]
	out := map[string]string{}
	for _, part := range strings.Split(body, "\n   hostctl ")[1:] {
		heading, _, _ := strings.Cut(part, "\n")
		// The longest command name the heading starts with.
		best := ""
		for _, c := range cmds {
			if (heading == c.Name || strings.HasPrefix(heading, c.Name+" ")) && len(c.Name) > len(best) {
				best = c.Name
			}
		}
		if best == "" {
			t.Errorf("heading %q names no command of the table", heading)
			continue
		}
		out[best] = part
	}
	return out
}

// TestManPageCommands: hostctl(1) has a section for every command of the
// table, with every flag the command registers, and groff warns about
// nothing. A command added to the table (here one the test adds) is in
// the page without anyone writing it: the page is the table's.
func TestManPageCommands(t *testing.T) {
	added := &cli.Command{Name: "frobnicate now", Args: "NAME", Summary: "a command only this test has", Client: true,
		Setup: func(fs *flag.FlagSet) func(context.Context, *cli.Call) error {
			fs.Duration("frob-wait", 0, "how long to frobnicate")
			return nil
		}}
	cmds := append(cli.Commands(), serve.Command(), added,
		&cli.Command{Name: "help"}, &cli.Command{Name: "completion"}, &cli.Command{Name: "man"})
	page := manPage(t, "", added)
	for _, want := range []string{"HOSTCTL(1)", "NAME\n       hostctl - ", "SYNOPSIS", "DESCRIPTION", "CLIENT FLAGS", "ENVIRONMENT",
		"FILES\n       /etc/vmeta/hostctl.yaml", "EXIT STATUS", "SEE ALSO", "hostctl.yaml(5)", "2023-11-14"} {
		if !strings.Contains(page, want) {
			t.Errorf("hostctl(1) lacks %q", want)
		}
	}
	sections := commandSections(t, page, cmds)
	for _, c := range cmds {
		sec, ok := sections[c.Name]
		if !ok {
			t.Errorf("hostctl(1) has no section for %q", c.Name)
			continue
		}
		if c.Summary != "" && !strings.Contains(mantest.Fold(sec), mantest.Fold(c.Summary)) {
			t.Errorf("hostctl(1) %s: lacks the summary %q:\n%s", c.Name, c.Summary, sec)
		}
		if c.Setup == nil {
			continue
		}
		fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
		c.Setup(fs)
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.Contains(sec, "\n       "+manpage.Option(f.Name)+"\n") && !strings.Contains(sec, "\n       "+manpage.Option(f.Name)+" ") {
				t.Errorf("hostctl(1) %s: lacks the flag %s:\n%s", c.Name, manpage.Option(f.Name), sec)
			}
		})
		if c.ConfigFile && !strings.Contains(sec, "\n       --config ") {
			t.Errorf("hostctl(1) %s: lacks --config", c.Name)
		}
	}
	if sec := sections["frobnicate now"]; !strings.Contains(sec, "--frob-wait duration") || !strings.Contains(sec, "client flags") {
		t.Errorf("the added command's section lacks its flag or the client flags:\n%s", sec)
	}
	for _, f := range []string{"--socket", "--api", "--output"} {
		if !strings.Contains(page[strings.Index(page, "\nCLIENT FLAGS\n"):], "\n       "+f+" ") {
			t.Errorf("CLIENT FLAGS lacks %s", f)
		}
	}
}

// TestManPageConfig: hostctl.yaml(5) lists every flag of serve as a key,
// with its type, and not --config itself.
func TestManPageConfig(t *testing.T) {
	page := manPage(t, cli.PageConfig)
	for _, want := range []string{"HOSTCTL.YAML(5)", "NAME\n       hostctl.yaml - ", "SYNOPSIS\n       /etc/vmeta/hostctl.yaml\n",
		"DESCRIPTION", "KEYS", "EXAMPLE", "SEE ALSO", "\n       data-dir: string\n", "\n       reconcile-interval: duration\n",
		"\n       domain-memory: integer\n", "\n       metadata-access-log: boolean\n", "\n       apply: list\n"} {
		if !strings.Contains(page, want) {
			t.Errorf("hostctl.yaml(5) lacks %q:\n%s", want, page)
		}
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	serve.Command().Setup(fs)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		if !strings.Contains(page, "\n       "+f.Name+": ") {
			t.Errorf("hostctl.yaml(5) lacks the key %s", f.Name)
		}
	})
	if n < 30 || strings.Contains(page, "\n       config: ") {
		t.Errorf("serve has %d flags; or the page lists config as a key", n)
	}
}

// TestManUsage: an unknown page is a usage error.
func TestManUsage(t *testing.T) {
	if code, _, errOut := hostctl(t, "man", "nope"); code != 2 || !strings.Contains(errOut, `unknown page "nope"`) {
		t.Errorf("hostctl man nope: exit %d: %s", code, errOut)
	}
}
