package pkgbuild

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/manpage/mantest"
	"github.com/vmeta/vmeta/internal/testenv"
)

// buildBinaries builds the packages' binaries (as make package does:
// static, trimmed) into a temporary directory.
func buildBinaries(t *testing.T, root string, pkgs ...string) string {
	t.Helper()
	bin := t.TempDir()
	cmd := exec.Command("go", append([]string{"build", "-trimpath", "-ldflags=-s -w", "-o", bin + "/"}, pkgs...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func testInputs(t *testing.T, root, bin string) Inputs {
	return Inputs{Root: root, Bin: bin, Describe: "v1.2.3-4-gabc1234", MTime: time.Unix(1700000000, 0).UTC(),
		Maintainer: "Test <test@example.org>", ModCache: goEnv(t, "GOMODCACHE"), GoRoot: goEnv(t, "GOROOT")}
}

// extract unpacks the .deb into a new directory and returns it.
func extract(t *testing.T, deb string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command(testenv.LookPath(t, "dpkg-deb"), "-x", deb, dir).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x: %v\n%s", err, out)
	}
	return dir
}

// lintian checks the package and fails on any error or warning; a
// no-manual-page warning is named.
func lintian(t *testing.T, deb string) {
	t.Helper()
	cmd := exec.Command(testenv.LookPath(t, "lintian"), "--tag-display-limit", "0", deb)
	out, _ := cmd.CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "E: ") || strings.HasPrefix(l, "W: ") || strings.Contains(l, "no-manual-page") {
			t.Errorf("lintian %s: %s", filepath.Base(deb), l)
		}
	}
}

// manText renders the packaged, gzipped page (groff warning about nothing).
func manText(t *testing.T, root, path string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	page, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return mantest.Render(t, filepath.Base(strings.TrimSuffix(path, ".gz")), page)
}

// TestHostPackage builds vmeta-host from the real binaries and checks
// what an operator gets: lintian clean (no no-manual-page), the manual
// pages rendering with man, the shell completions loading, and the
// configuration file installed as a conffile.
func TestHostPackage(t *testing.T) {
	root := filepath.Dir(goEnv(t, "GOMOD"))
	bin := buildBinaries(t, root, "./hostctl/cmd/hostctl", "./server/cmd/vmeta-metadata")
	deb, err := Build(testInputs(t, root, bin), Target{Name: "vmeta-host", Format: "deb"}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dpkgDeb := testenv.LookPath(t, "dpkg-deb")
	list, err := exec.Command(dpkgDeb, "-c", deb).CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg-deb -c: %v\n%s", err, list)
	}
	for _, want := range []string{"./usr/bin/hostctl", "./usr/bin/vmeta-metadata", "./etc/vmeta/hostctl.yaml",
		"./usr/share/man/man1/hostctl.1.gz", "./usr/share/man/man5/hostctl.yaml.5.gz", "./usr/share/man/man8/vmeta-metadata.8.gz",
		"./usr/share/bash-completion/completions/hostctl", "./usr/share/zsh/vendor-completions/_hostctl", "./usr/share/fish/vendor_completions.d/hostctl.fish",
		"./usr/share/vmeta/openapi.yaml"} {
		if !strings.Contains(string(list), want+"\n") {
			t.Errorf("package lacks %s:\n%s", want, list)
		}
	}
	conffiles, err := exec.Command(dpkgDeb, "--info", deb, "conffiles").CombinedOutput()
	if err != nil || !strings.Contains(string(conffiles), "/etc/vmeta/hostctl.yaml\n") || !strings.Contains(string(conffiles), "/etc/default/hostctl\n") {
		t.Errorf("conffiles: %v\n%s", err, conffiles)
	}
	lintian(t, deb)
	dir := extract(t, deb)

	t.Run("man", func(t *testing.T) {
		page := manText(t, dir, "usr/share/man/man1/hostctl.1.gz")
		for _, want := range []string{"HOSTCTL(1)", "SYNOPSIS", "COMMANDS", "\n   hostctl serve [--config /etc/vmeta/hostctl.yaml]\n",
			"\n   hostctl instance apply ", "\n   hostctl man ", "CLIENT FLAGS", "EXIT STATUS", "2023-11-14",
			// Built with a clean environment: the built-in default, whatever $VMETA_SOCKET the packager had.
			"--socket string admin API socket of the hostctl daemon (default: /run/vmeta/hostctl.sock)"} {
			if !strings.Contains(page, want) && !strings.Contains(mantest.Fold(page), want) {
				t.Errorf("hostctl(1) lacks %q", want)
			}
		}
		page = manText(t, dir, "usr/share/man/man5/hostctl.yaml.5.gz")
		for _, want := range []string{"HOSTCTL.YAML(5)", "KEYS", "\n       data-dir: string\n", "data directory (embedded store, config drives) (default: /var/lib/vmeta)"} {
			if !strings.Contains(page, want) && !strings.Contains(mantest.Fold(page), want) {
				t.Errorf("hostctl.yaml(5) lacks %q", want)
			}
		}
		page = manText(t, dir, "usr/share/man/man8/vmeta-metadata.8.gz")
		for _, want := range []string{"VMETA-METADATA(8)", "OPTIONS", "\n       --store string\n"} {
			if !strings.Contains(page, want) {
				t.Errorf("vmeta-metadata(8) lacks %q", want)
			}
		}
	})

	t.Run("completion", func(t *testing.T) {
		bash := testenv.LookPath(t, "bash")
		script := filepath.Join(dir, "usr/share/bash-completion/completions/hostctl")
		for _, tc := range []struct{ line, want string }{
			{"hostctl inst", "instance"},
			{"hostctl instance sh", "show shelve"},
			{"hostctl serve --config-drive-f", "--config-drive-format"},
		} {
			words := strings.Split(tc.line, " ")
			cmd := exec.Command(bash, "--norc", "--noprofile", "-c", `source "$1" && shift && complete -p hostctl >/dev/null && COMP_WORDS=("$@") && COMP_CWORD=$(($# - 1)) && _hostctl && echo "${COMPREPLY[*]}"`, "bash", script)
			cmd.Args = append(cmd.Args, words...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("bash completing %q: %v\n%s", tc.line, err, out)
			}
			if got := strings.Join(strings.Fields(string(out)), " "); got != tc.want {
				t.Errorf("bash completes %q to %q, want %q", tc.line, got, tc.want)
			}
		}
		zsh := testenv.LookPath(t, "zsh")
		if out, err := exec.Command(zsh, "-n", filepath.Join(dir, "usr/share/zsh/vendor-completions/_hostctl")).CombinedOutput(); err != nil {
			t.Errorf("zsh -n _hostctl: %v\n%s", err, out)
		}
		// fish finds the script where the package puts it: its vendor
		// completions directory under $XDG_DATA_DIRS, for the command the
		// package puts in PATH.
		fish := testenv.LookPath(t, "fish")
		// (fish's own config, which --no-config would skip, is what sets
		// the completion path; the user's is in an empty home.)
		home := t.TempDir()
		cmd := exec.Command(fish, "-c", `complete -C"hostctl inst"`)
		cmd.Env = append(os.Environ(), "XDG_DATA_DIRS="+filepath.Join(dir, "usr/share"), "PATH="+filepath.Join(dir, "usr/bin")+":"+os.Getenv("PATH"), "HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_DATA_HOME="+home)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "instance\t") || strings.Count(string(out), "\n") != 1 {
			t.Errorf("fish, with the package's share directory in XDG_DATA_DIRS, completes \"hostctl inst\" to %q (%v)", out, err)
		}
	})

	t.Run("unit", func(t *testing.T) { runUnit(t, dir) })
}

// unitService reads a unit's [Service] ExecStart and EnvironmentFile
// lines.
func unitService(t *testing.T, path string) (execStart string, envFiles []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";"):
		case strings.HasPrefix(l, "["):
			section = l
		case section == "[Service]":
			k, v, _ := strings.Cut(l, "=")
			switch k {
			case "ExecStart":
				if execStart != "" {
					t.Fatalf("%s: two ExecStart lines", path)
				}
				execStart = v
			case "EnvironmentFile":
				envFiles = append(envFiles, v)
			}
		}
	}
	if execStart == "" {
		t.Fatalf("%s: no ExecStart", path)
	}
	return execStart, envFiles
}

// envFile reads KEY=VALUE lines as systemd's EnvironmentFile= does (a
// value may be quoted).
func envFile(t *testing.T, path string, env map[string]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";") {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			t.Fatalf("%s: not KEY=VALUE: %q", path, l)
		}
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		env[strings.TrimSpace(k)] = v
	}
}

// expand turns ExecStart into argv as systemd does: words split on white
// space; $NAME alone is the variable's value split into words, ${NAME} its
// value as one word.
func expand(t *testing.T, execStart string, env map[string]string) []string {
	t.Helper()
	if strings.ContainsAny(execStart, `"'\`) || strings.ContainsAny(execStart[:1], "-@+!:") {
		t.Fatalf("ExecStart %q: quoting or a prefix this test does not read", execStart)
	}
	var argv []string
	for _, w := range strings.Fields(execStart) {
		switch {
		case strings.HasPrefix(w, "${") && strings.HasSuffix(w, "}"):
			argv = append(argv, env[w[2:len(w)-1]])
		case strings.HasPrefix(w, "$"):
			argv = append(argv, strings.Fields(env[w[1:]])...)
		case strings.Contains(w, "$"):
			t.Fatalf("ExecStart word %q: a variable inside a word", w)
		default:
			argv = append(argv, w)
		}
	}
	return argv
}

// runUnit starts hostctl serve from the extracted package exactly as
// hostctl.service's ExecStart would: the packaged binary, the packaged
// /etc/default/hostctl's variables, the packaged configuration file. The
// file system is the package's tree (dir) instead of /: a path of the
// command line is taken under dir. What the unit gets from systemd and
// this test cannot take from the host is added to the copy of the
// configuration file: the data directory and socket (StateDirectory,
// RuntimeDirectory: under dir), an ephemeral metadata port, and no
// hypervisor (the host's libvirt is shared with other tests).
func runUnit(t *testing.T, dir string) {
	execStart, envFiles := unitService(t, filepath.Join(dir, "lib/systemd/system/hostctl.service"))
	env := map[string]string{}
	for _, f := range envFiles {
		optional := strings.HasPrefix(f, "-")
		p := filepath.Join(dir, strings.TrimPrefix(f, "-"))
		if _, err := os.Stat(p); err != nil && optional {
			continue // not packaged: /etc/vmeta/store.env is the operator's
		}
		envFile(t, p, env)
	}
	if _, ok := env["HOSTCTL_OPTS"]; !ok {
		t.Errorf("the unit's environment files %v set no HOSTCTL_OPTS", envFiles)
	}
	argv := expand(t, execStart, env)
	if got := strings.Join(argv, " "); !strings.HasPrefix(got, "/usr/bin/hostctl serve --config /etc/vmeta/hostctl.yaml") {
		t.Errorf("ExecStart runs %q, want hostctl serve --config /etc/vmeta/hostctl.yaml first", got)
	}
	var config string
	for i, a := range argv {
		if strings.HasPrefix(a, "/") {
			argv[i] = filepath.Join(dir, a)
			if _, err := os.Stat(argv[i]); err != nil {
				t.Fatalf("ExecStart names %s, which the package does not install: %v", a, err)
			}
		}
		if i > 0 && argv[i-1] == "--config" {
			config = argv[i]
		}
	}
	if config == "" {
		t.Fatal("ExecStart passes no --config")
	}
	// systemd's StateDirectory= and RuntimeDirectory=, here under dir.
	stateDir, runDir := filepath.Join(dir, "var/lib/vmeta"), filepath.Join(dir, "run/vmeta")
	for _, d := range []string{stateDir, runDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	socket := filepath.Join(runDir, "hostctl.sock")
	f, err := os.OpenFile(config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "\n# The test's sandbox.\ndata-dir: %s\nsocket: %s\nmetadata-listen: 127.0.0.1:0\nvirt: none\n", stateDir, socket)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p, err := testenv.StartProcess(t, "hostctl serve (hostctl.service)", cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	var body []byte
	if err := p.WaitReady(60*time.Second, 20*time.Millisecond, func() error {
		resp, err := hc.Get("http://hostctl/v1/health")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ = io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /v1/health: %s: %s", resp.Status, body)
		}
		return nil
	}); err != nil {
		t.Fatalf("hostctl serve as the unit runs it did not answer /v1/health: %v\n%s", err, p.Output())
	}
	if !strings.Contains(string(body), `"ok"`) {
		t.Errorf("GET /v1/health: %s", body)
	}
	p.Stop() // SIGTERM, as systemctl stop; a clean exit (0) or the test fails
}
