package cli_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/cli"
)

type testFlags struct {
	name    string
	verbose bool
	count   int
	rate    float64
	every   time.Duration
	apply   []string
}

func newTestFlags() (*flag.FlagSet, *testFlags) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	v := &testFlags{}
	fs.StringVar(&v.name, "name", "def", "")
	fs.BoolVar(&v.verbose, "verbose", false, "")
	fs.IntVar(&v.count, "count", 1, "")
	fs.Float64Var(&v.rate, "rate", 1, "")
	fs.DurationVar(&v.every, "every", time.Second, "")
	fs.Func("apply", "", func(s string) error { v.apply = append(v.apply, s); return nil })
	return fs, v
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "hostctl.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoadConfigFile: each key sets its flag, unless the command line set
// it already.
func TestLoadConfigFile(t *testing.T) {
	fs, v := newTestFlags()
	if err := fs.Parse([]string{"--count", "7"}); err != nil {
		t.Fatal(err)
	}
	p := writeFile(t, "# comment\nname: web\nverbose: true\ncount: 3\nrate: 2.5\nevery: 1m30s\napply: [a.yaml, b.yaml]\n")
	if err := cli.LoadConfigFile(fs, p); err != nil {
		t.Fatal(err)
	}
	got := *v
	want := testFlags{name: "web", verbose: true, count: 7, rate: 2.5, every: 90 * time.Second}
	if got.name != want.name || got.verbose != want.verbose || got.count != want.count || got.rate != want.rate || got.every != want.every || strings.Join(got.apply, ",") != "a.yaml,b.yaml" {
		t.Errorf("flags = %+v, want %+v with apply a.yaml,b.yaml", got, want)
	}
	// An empty file changes nothing.
	fs, v = newTestFlags()
	if err := cli.LoadConfigFile(fs, writeFile(t, "")); err != nil || v.name != "def" {
		t.Errorf("empty file: %v, name %q", err, v.name)
	}
}

// TestLoadConfigFileErrors: an unknown key names the key and the file, a
// wrong type the key and the value.
func TestLoadConfigFileErrors(t *testing.T) {
	for _, tc := range []struct {
		body string
		says []string
	}{
		{"nmae: web\n", []string{`unknown key "nmae"`}},
		{"config: other.yaml\n", []string{`unknown key "config"`}},
		{"count: many\n", []string{"count", `"many"`, "integer"}},
		{"count: 1.5\n", []string{"count", "1.5", "integer"}},
		{"verbose: maybe\n", []string{"verbose", `"maybe"`, "true or false"}},
		{"rate: fast\n", []string{"rate", `"fast"`, "number"}},
		{"every: 10\n", []string{"every", "10", "duration"}},
		{"name: [a, b]\n", []string{"name", `["a","b"]`, "string"}},
		{"name: yes\n", []string{"name", "true", "string"}},
		{"apply: {a: 1}\n", []string{"apply", `{"a":1}`, "list of strings"}},
		{"- a\n- b\n", []string{"map of flag names"}},
		{"name: [\n", []string{"yaml"}},
	} {
		fs, v := newTestFlags()
		p := writeFile(t, tc.body)
		err := cli.LoadConfigFile(fs, p)
		if err == nil {
			t.Errorf("%q: accepted (%+v)", tc.body, *v)
			continue
		}
		for _, s := range append(tc.says, p) {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%q: %v: does not say %q", tc.body, err, s)
			}
		}
	}
	fs, _ := newTestFlags()
	if err := cli.LoadConfigFile(fs, filepath.Join(t.TempDir(), "absent.yaml")); err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Errorf("missing file: %v", err)
	}
}
