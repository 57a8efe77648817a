package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/cli"
	"github.com/vmeta/vmeta/hostctl/daemon"
	"github.com/vmeta/vmeta/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite hostctl/dist/hostctl.yaml from the flags")

// exampleFile is the commented configuration file a host package ships.
const exampleFile = "../../dist/hostctl.yaml"

// serveFlags is the serve command's flag set with the defaults a host
// sees (no $VMETA_* overrides).
func serveFlags(t *testing.T) *flag.FlagSet {
	t.Helper()
	for _, env := range []string{daemon.VirtEnv, daemon.DomainTypeEnv, client.SocketEnv} {
		t.Setenv(env, "")
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	Command().Setup(fs)
	return fs
}

// example renders the example configuration file from the flags: every
// flag, its help as a comment, its default commented out.
func example(fs *flag.FlagSet) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `# %s: the configuration of 'hostctl serve --config %s'.
#
# One key per flag of 'hostctl serve' (see 'hostctl serve --help' and
# hostctl.yaml(5)), named as the flag; a flag given on the command line
# overrides the file. Unknown keys are an error. Every key is optional: the
# values below, commented out, are the defaults.
#
# The hostctl.service unit runs
#   hostctl serve --config %s $HOSTCTL_OPTS:
# the flags in HOSTCTL_OPTS (/etc/default/hostctl) override this file. The
# unit may write only /var/lib/vmeta and /run/vmeta: another data-dir or
# socket needs ReadWritePaths= in a drop-in (systemctl edit hostctl).
#
# Generated from the flags: go test ./hostctl/cli/serve -run TestExampleConfig -update
`, DefaultConfigFile, DefaultConfigFile, DefaultConfigFile)
	fs.VisitAll(func(f *flag.Flag) {
		b.WriteString("\n")
		for _, l := range wrap(f.Usage, 76) {
			fmt.Fprintf(&b, "# %s\n", l)
		}
		fmt.Fprintf(&b, "#%s: %s\n", f.Name, yamlDefault(f))
	})
	return b.Bytes()
}

func yamlDefault(f *flag.Flag) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return "[] # a list; repeatable on the command line"
	}
	switch v := g.Get().(type) {
	case string:
		b, _ := json.Marshal(v)
		return string(b)
	case time.Duration:
		return `"` + v.String() + `"`
	default:
		return fmt.Sprint(v)
	}
}

func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}

// TestExampleConfig: the shipped example lists exactly the serve flags,
// with their help and defaults, and loads as a configuration file once its
// keys are uncommented.
func TestExampleConfig(t *testing.T) {
	want := example(serveFlags(t))
	if *update {
		if err := os.WriteFile(exampleFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what the flags say; run go test ./hostctl/cli/serve -run TestExampleConfig -update\n--- got\n%s\n--- want\n%s", exampleFile, got, want)
	}
	// Uncommented, every key is accepted with its default's type.
	keyLine := regexp.MustCompile(`(?m)^#([a-z][a-z0-9-]*: )`)
	keys := keyLine.ReplaceAll(got, []byte("$1"))
	p := filepath.Join(t.TempDir(), "hostctl.yaml")
	if err := os.WriteFile(p, keys, 0o600); err != nil {
		t.Fatal(err)
	}
	fs := serveFlags(t)
	if err := cli.LoadConfigFile(fs, p); err != nil {
		t.Fatal(err)
	}
	set, listed := 0, len(keyLine.FindAll(got, -1))
	fs.Visit(func(*flag.Flag) { set++ })
	all := 0
	fs.VisitAll(func(*flag.Flag) { all++ })
	// Every key but the repeatable ones (apply, key-rotation: empty
	// lists) sets its flag.
	empty := bytes.Count(got, []byte(": [] # a list"))
	if listed != all || set != listed-empty {
		t.Errorf("the example lists %d keys of %d flags; uncommented, it set %d", listed, all, set)
	}
}

// TestServeConfigFile: `hostctl serve --config FILE` runs with the file's
// values, and flags on the command line override them.
func TestServeConfigFile(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "web.json")
	os.WriteFile(spec, []byte(`{"name":"web-1","addresses":["127.0.0.1"]}`), 0o600)
	dataDir := filepath.Join(dir, "data")
	fileSock, flagSock := filepath.Join(dir, "file.sock"), filepath.Join(dir, "flag.sock")
	conf := filepath.Join(dir, "hostctl.yaml")
	os.WriteFile(conf, fmt.Appendf(nil, `data-dir: %s
socket: %s
metadata-listen: 127.0.0.1:0
virt: none
domain-memory: 256
reconcile-interval: 30s
metadata-access-log: false
apply: [%s]
`, dataDir, fileSock, spec), 0o600)

	var stdout, stderr testenv.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"serve", "--config", conf, "--socket", flagSock}, cli.Env{Stdout: &stdout, Stderr: &stderr, Stdin: strings.NewReader("")})
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d:\n%s", code, stderr.String())
		}
	})
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(stdout.String(), "applied"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s\n%s", stderr.String(), stdout.String())
		}
	}
	if !strings.Contains(stderr.String(), "admin_socket="+flagSock) || !strings.Contains(stderr.String(), "store="+filepath.Join(dataDir, "vmeta.db")) {
		t.Errorf("the command line's socket and the file's data directory are not in force:\n%s", stderr.String())
	}
	if _, err := os.Stat(fileSock); err == nil {
		t.Errorf("the file's socket %s was created although --socket overrides it", fileSock)
	}
	if _, err := os.Stat(daemon.TokenKeyFilePath(dataDir)); err != nil {
		t.Errorf("token key file not in the file's data directory: %v", err)
	}
	list, err := client.NewUnix(flagSock).List(ctx)
	if err != nil || len(list) != 1 || list[0].Spec.Name != "web-1" {
		t.Errorf("list over the overriding socket: %v %v", list, err)
	}
}

// TestServeConfigFileErrors: a bad file stops serve before it starts, with
// a short error naming the file and the key.
func TestServeConfigFileErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ body, says string }{
		{"data-dir: " + dir + "\nvirtt: none\n", `unknown key "virtt"`},
		{"data-dir: " + dir + "\ndomain-memory: lots\n", `domain-memory: "lots": must be an integer`},
	} {
		conf := filepath.Join(dir, "hostctl.yaml")
		os.WriteFile(conf, []byte(tc.body), 0o600)
		var stderr testenv.SyncBuffer
		code := run(t.Context(), []string{"serve", "--config", conf, "--socket", filepath.Join(dir, "s.sock")}, cli.Env{Stdout: &stderr, Stderr: &stderr})
		if code != 2 || !strings.Contains(stderr.String(), tc.says) || !strings.Contains(stderr.String(), conf) {
			t.Errorf("%q: exit %d:\n%s", tc.body, code, stderr.String())
		}
	}
}
