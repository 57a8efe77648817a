package main

import (
	"flag"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/manpage"
	"github.com/vmeta/vmeta/internal/manpage/mantest"
)

// TestManual: `vmeta-agent man` prints vmeta-agent(8), which man renders
// without a groff warning, with a section for every command of the table
// and every flag the command registers; every command of the table is
// one run dispatches.
func TestManual(t *testing.T) {
	code, stdout, stderr := runCLI("man")
	if code != 0 || stderr != "" {
		t.Fatalf("vmeta-agent man: exit %d: %s", code, stderr)
	}
	page := mantest.Render(t, "vmeta-agent.8", []byte(stdout))
	for _, want := range []string{"VMETA-AGENT(8)", "NAME\n       vmeta-agent - ", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "EXIT STATUS", "FILES", "SEE ALSO"} {
		if !strings.Contains(page, want) {
			t.Errorf("vmeta-agent(8) lacks %q:\n%s", want, page)
		}
	}
	parts := strings.Split(page, "\n   vmeta-agent ")
	for _, c := range commands() {
		var sec string
		for _, p := range parts[1:] {
			if h, _, _ := strings.Cut(p, "\n"); h == c.name || strings.HasPrefix(h, c.name+" ") {
				sec = p
			}
		}
		if sec == "" {
			t.Errorf("vmeta-agent(8) has no section for %s", c.name)
			continue
		}
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.setup(fs)
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.Contains(sec, "\n       "+manpage.Option(f.Name)+" ") && !strings.Contains(sec, "\n       "+manpage.Option(f.Name)+"\n") {
				t.Errorf("vmeta-agent(8) %s: lacks %s", c.name, manpage.Option(f.Name))
			}
		})
		if code, _, stderr := runCLI(c.name, "-h"); code != 1 || strings.Contains(stderr, "unknown command") || !strings.Contains(stderr, "Usage of vmeta-agent "+c.name) {
			t.Errorf("vmeta-agent %s -h: exit %d:\n%s", c.name, code, stderr)
		}
		if !strings.Contains(usage(), "  "+c.name+" ") {
			t.Errorf("the usage lacks %s", c.name)
		}
	}
}
