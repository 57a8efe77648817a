package replica

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/manpage"
	"github.com/vmeta/vmeta/internal/manpage/mantest"
)

// TestManual: `vmeta-metadata man` prints vmeta-metadata(8), which man
// renders without a groff warning and which lists every flag the command
// line takes.
func TestManual(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Run(context.Background(), []string{"man"}, Env{Stdout: &out, Stderr: &errOut}); code != 0 || errOut.Len() > 0 {
		t.Fatalf("vmeta-metadata man: exit %d: %s", code, errOut.String())
	}
	page := mantest.Render(t, "vmeta-metadata.8", out.Bytes())
	for _, want := range []string{"VMETA-METADATA(8)", "NAME\n       vmeta-metadata - ", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "ENVIRONMENT\n       VMETA_STORE_PASSWORD", "EXIT STATUS", "SEE ALSO"} {
		if !strings.Contains(page, want) {
			t.Errorf("vmeta-metadata(8) lacks %q:\n%s", want, page)
		}
	}
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	var f flags
	f.register(fs)
	n := 0
	fs.VisitAll(func(fl *flag.Flag) {
		n++
		if !strings.Contains(page, "\n       "+manpage.Option(fl.Name)+" ") && !strings.Contains(page, "\n       "+manpage.Option(fl.Name)+"\n") {
			t.Errorf("vmeta-metadata(8) lacks %s", manpage.Option(fl.Name))
		}
	})
	if n < 10 {
		t.Errorf("only %d flags registered", n)
	}
}
