package e2e

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/testenv"
)

// hostctlBin and replicaBin are the hostctl and vmeta-metadata binaries
// TestMain builds from this checkout.
var hostctlBin, replicaBin string

func TestMain(m *testing.M) {
	// The tests wait on daemons, guests and libvirtd far more than they
	// compute: unless -parallel is given, run up to 4 at once (go test's
	// default is GOMAXPROCS, 2 on a two-core machine).
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given && runtime.GOMAXPROCS(0) < 4 {
		if err := flag.Set("test.parallel", "4"); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
			os.Exit(1)
		}
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "vmeta-e2e-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	hostctlBin = filepath.Join(dir, "hostctl")
	replicaBin = filepath.Join(dir, "vmeta-metadata")
	// One go build for both: with -o naming a directory, each main
	// package is written there under its own name.
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if raceEnabled {
		args = append(args, "-race")
	}
	pkgs := []string{"./hostctl/cmd/hostctl", "./server/cmd/vmeta-metadata"}
	cmd := exec.Command("go", append(args, pkgs...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go build %s: %v\n%s", strings.Join(pkgs, " "), err, out)
		return 1
	}
	return m.Run()
}

// moduleRoot returns the directory of the go.mod this package belongs to.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside a module")
	}
	return filepath.Dir(gomod), nil
}

// result is what a finished command left behind.
type result struct {
	args           []string
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("`%s` exited %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// runCmd runs a command to completion (at most a minute) and returns its
// output and exit status. Failing to start it fails the test.
func runCmd(t testing.TB, env []string, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{args: append([]string{filepath.Base(name)}, args...), stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ctx.Err() == nil:
		r.code = ee.ExitCode()
	default:
		t.Fatalf("run %s: %v\n%s", strings.Join(r.args, " "), err, r)
	}
	return r
}

// hostctl runs the hostctl binary with args and the given extra
// environment.
func hostctl(t testing.TB, env []string, args ...string) result {
	t.Helper()
	return runCmd(t, testenv.ChildEnv(nil, env...), hostctlBin, args...)
}

// daemon is a running `hostctl serve`.
type daemon struct {
	t       testing.TB
	DataDir string
	Socket  string
	// MetadataAddr is the host:port of the metadata service (127.0.0.1).
	MetadataAddr string
	store        string
	args         []string
	env          []string
	bin          string

	proc *testenv.Process
}

// daemonOptions configure startDaemon.
type daemonOptions struct {
	// DataDir is the data directory; a fresh t.TempDir when empty.
	DataDir string
	// Store is the --store value; the embedded bolt store when empty.
	Store string
	// Args are more `hostctl serve` flags (e.g. --metadata-token-policy).
	Args []string
	// Env is more environment for the daemon (NAME=value).
	Env []string
	// Bin is the hostctl binary; hostctlBin when empty (the key rotation
	// crash matrix uses one built with -tags vmetacrash).
	Bin string
}

// startDaemon starts `hostctl serve` on its own admin socket and a free
// loopback port, waits until the admin socket answers, and stops it
// (SIGTERM, then wait) when the test ends.
func startDaemon(t testing.TB, opts daemonOptions) *daemon {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	// Unix socket paths are limited to 108 bytes; t.TempDir paths carry
	// the test name, so the socket lives in a short directory of its own.
	sockDir, err := os.MkdirTemp("", "vmeta-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	d := &daemon{t: t, DataDir: opts.DataDir, Socket: filepath.Join(sockDir, "hostctl.sock"), store: opts.Store, args: opts.Args, env: opts.Env, bin: opts.Bin}
	t.Cleanup(func() {
		d.Stop()
		if t.Failed() {
			t.Logf("hostctl serve (data dir %s) logged:\n%s", d.DataDir, d.Log())
		}
	})
	// Another process can take the free port before the daemon binds it;
	// try a few.
	for attempt := 1; ; attempt++ {
		err := d.start()
		if err == nil {
			return d
		}
		if attempt == 5 || !strings.Contains(d.Log(), "address already in use") {
			t.Fatalf("start hostctl serve: %v\nits output:\n%s", err, d.Log())
		}
	}
}

func (d *daemon) start() error {
	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	d.MetadataAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := []string{"serve", "--data-dir", d.DataDir, "--socket", d.Socket, "--metadata-listen", d.MetadataAddr}
	if d.store != "" {
		args = append(args, "--store", d.store)
	}
	args = append(args, d.args...)
	bin := hostctlBin
	if d.bin != "" {
		bin = d.bin
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = testenv.ChildEnv(nil, d.env...)
	d.proc, err = testenv.StartProcess(d.t, "hostctl serve", cmd)
	if err != nil {
		return err
	}
	return d.proc.WaitReady(20*time.Second, 20*time.Millisecond, func() error {
		if r := hostctl(d.t, nil, "instance", "list", "--socket", d.Socket); r.code != 0 {
			return fmt.Errorf("admin socket %s; last attempt: %s", d.Socket, r)
		}
		return nil
	})
}

// Stop sends SIGTERM and waits for the daemon to exit; it expects a clean
// exit (status 0). Stopping a stopped daemon does nothing.
func (d *daemon) Stop() {
	d.t.Helper()
	d.proc.Stop()
}

// Log is what the daemon has written so far.
func (d *daemon) Log() string { return d.proc.Output() }

// Restart stops the daemon and starts a new one on the same data directory
// and store, with a new socket and metadata port.
func (d *daemon) Restart() *daemon {
	d.t.Helper()
	d.Stop()
	return startDaemon(d.t, daemonOptions{DataDir: d.DataDir, Store: d.store, Args: d.args, Env: d.env, Bin: d.bin})
}

// Ctl runs a hostctl client command against this daemon (--socket is
// appended; every client command accepts flags after its arguments).
func (d *daemon) Ctl(args ...string) result {
	d.t.Helper()
	return hostctl(d.t, nil, append(args, "--socket", d.Socket)...)
}

// MustCtl is Ctl that fails the test on a non-zero exit.
func (d *daemon) MustCtl(args ...string) result {
	d.t.Helper()
	r := d.Ctl(args...)
	if r.code != 0 {
		d.t.Fatalf("%s", r)
	}
	return r
}

// Apply writes spec to a file and applies it; it fails the test on error.
func (d *daemon) Apply(spec string) result {
	d.t.Helper()
	return d.MustCtl("instance", "apply", "-f", writeSpec(d.t, spec))
}

// URL returns the metadata service's base URL.
func (d *daemon) URL() string { return "http://" + d.MetadataAddr }

var specSeq struct {
	sync.Mutex
	n int
}

// writeSpec writes a spec into a fresh file of the test's temp dir.
func writeSpec(t testing.TB, spec string) string {
	t.Helper()
	specSeq.Lock()
	specSeq.n++
	n := specSeq.n
	specSeq.Unlock()
	p := filepath.Join(t.TempDir(), fmt.Sprintf("spec-%d.yaml", n))
	if err := os.WriteFile(p, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// httpResult is one metadata service response.
type httpResult struct {
	status      int
	contentType string
	body        []byte
}

// getFrom GETs url from the local address from (e.g. "127.0.0.2"; the
// metadata service identifies the caller by it). No proxies, no keep-alive.
func getFrom(t testing.TB, from, url string) httpResult {
	t.Helper()
	dialer := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{Proxy: nil, DialContext: dialer.DialContext, DisableKeepAlives: true},
	}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s from %s: %v", url, from, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s from %s: read body: %v", url, from, err)
	}
	return httpResult{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), body: b}
}

// mustGet GETs url from 127.0.0.1 and expects 200.
func mustGet(t testing.TB, url string) []byte {
	t.Helper()
	r := getFrom(t, "127.0.0.1", url)
	if r.status != http.StatusOK {
		t.Fatalf("GET %s: status %d, want 200; body: %s", url, r.status, r.body)
	}
	return r.body
}
