package manpage_test

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/manpage"
	"github.com/vmeta/vmeta/internal/manpage/mantest"
)

// TestEscape: what could be read as roff is escaped; option dashes are
// minus signs, hyphens inside words stay hyphens.
func TestEscape(t *testing.T) {
	p := manpage.Page{Name: "x", Section: "1", Summary: "s", Sections: []manpage.Section{{Title: "t", Blocks: []manpage.Block{
		{Text: `.starts with a dot`},
		{Text: `'starts with a quote`},
		{Text: `a\b one-time-use --data-dir -f (--paren) x=-1 — "q"`},
	}}}}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\n\\&.starts with a dot\n",
		"\n\\&'starts with a quote\n",
		`a\eb one-time-use \-\-data\-dir \-f (\-\-paren) x=\-1 \[u2014] "q"`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("page lacks %q:\n%s", want, b.String())
		}
	}
	for i, c := range b.Bytes() {
		if c > 0x7e {
			t.Fatalf("non-ASCII byte %#x at %d", c, i)
		}
	}
}

// TestRender: a page with every kind of block renders with man, groff
// warns about nothing, and the text, flags and defaults are there.
func TestRender(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("data-dir", "/var/lib/x", "the `directory` of the data")
	fs.Bool("v", false, "verbose")
	fs.Duration("timeout", 10*time.Second, "how long to wait")
	p := manpage.Page{Name: "demo", Section: "8", Summary: "a demo — of pages", Date: "2026-01-02", Source: "vmeta v1.2.3", Manual: manpage.ManualTitle,
		Synopsis: []string{"demo [--data-dir DIR] COMMAND", "demo --help"},
		Sections: []manpage.Section{
			{Title: "Description", Blocks: []manpage.Block{{Text: "First paragraph,\nfilled.\n\nSecond paragraph:\n  literal   line\n  another\nafter."}}},
			{Title: "Options", Blocks: manpage.FlagBlocks(fs)},
			{Title: "Commands", Blocks: []manpage.Block{{Sub: "demo run NAME"}, {Text: "runs NAME"}, {Tag: "--x N", Text: "tagged\n\nsecond tagged paragraph"}}},
		}}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	out := mantest.Render(t, "demo.8", b.Bytes())
	for _, want := range []string{"DEMO(8)", "NAME", "demo - a demo — of pages", "SYNOPSIS", "DESCRIPTION", "First paragraph, filled.",
		"  literal   line\n", "--data-dir directory", "the directory of the data (default: /var/lib/x)", "--timeout duration",
		"(default: 10s)", "-v     verbose", "demo run NAME", "second tagged paragraph", "2026-01-02", "vmeta v1.2.3"} {
		if !strings.Contains(out, want) {
			t.Errorf("man -l output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "verbose (default") {
		t.Errorf("a zero default is shown:\n%s", out)
	}
}

func TestDate(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	if got := manpage.Date(); got != "2023-11-14" {
		t.Errorf("Date() = %q", got)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "")
	if got := manpage.Date(); got != "" {
		t.Errorf("Date() without SOURCE_DATE_EPOCH = %q", got)
	}
}
