package guestvm

// The host side of the test: the hostctl binary built from this checkout,
// `hostctl serve --virt libvirt` as a daemon, and its CLI.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/testenv"
)

// buildHostctl builds hostctl (with -race when the test runs under the
// race detector).
func buildHostctl(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "hostctl")
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(testenv.LookPath(t, "go"), append(args, "./hostctl/cmd/hostctl")...)
	cmd.Dir = moduleRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build hostctl: %v\n%s", err, b)
	}
	return out
}

// hostd is a running `hostctl serve --virt libvirt`.
type hostd struct {
	t       *testing.T
	bin     string
	DataDir string
	Socket  string
	// MetadataAddr is the metadata service's loopback address (the guest
	// does not use it: it reads the config drive).
	MetadataAddr string

	proc *testenv.Process
}

// startHostd starts `hostctl serve --virt libvirt` on uri: domains under
// TCG booting the test guest's kernel and initramfs, reconciling on
// libvirt's events only, logging at debug level. It is stopped (SIGTERM,
// expecting a clean exit) when the test ends, and its log shown if the
// test failed.
func startHostd(t *testing.T, bin, uri string, g testenv.Guest, extraArgs ...string) *hostd {
	t.Helper()
	// Unix socket paths are limited to 108 bytes; t.TempDir carries the
	// test name.
	sockDir, err := os.MkdirTemp("", "vmeta-gvm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	d := &hostd{t: t, bin: bin, DataDir: t.TempDir(), Socket: filepath.Join(sockDir, "hostctl.sock")}
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			t.Logf("hostctl serve (data dir %s) logged:\n%s", d.DataDir, d.proc.Output())
		}
	})
	for attempt := 1; ; attempt++ {
		err := d.start(uri, g, extraArgs)
		if err == nil {
			return d
		}
		// Another process may take the free port before hostctl binds it.
		if attempt == 5 || !strings.Contains(d.proc.Output(), "address already in use") {
			t.Fatalf("start hostctl serve: %v\nits output:\n%s", err, d.proc.Output())
		}
	}
}

func (d *hostd) start(uri string, g testenv.Guest, extraArgs []string) error {
	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	d.MetadataAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := []string{"serve", "--virt", "libvirt", "--libvirt-uri", uri,
		"--domain-type", "qemu", "--domain-memory", "512",
		"--domain-kernel", g.Kernel, "--domain-initrd", g.Initrd, "--domain-cmdline", g.Cmdline,
		"--data-dir", d.DataDir, "--socket", d.Socket, "--metadata-listen", d.MetadataAddr,
		"--reconcile-interval", "0", "--log-level", "debug",
		// LUKS disks: a short PBKDF time (QEMU's default, 2 s, costs that
		// much CPU at every create and start).
		"--luks-iter-time", "100ms"}
	args = append(args, extraArgs...)
	cmd := exec.Command(d.bin, args...)
	cmd.Env = testenv.ChildEnv([]string{"VMETA_VIRT"})
	d.proc, err = testenv.StartProcess(d.t, "hostctl serve", cmd)
	if err != nil {
		return err
	}
	d.proc.StopTimeout = 30 * time.Second
	return d.proc.WaitReady(30*time.Second, 50*time.Millisecond, func() error {
		if _, err := d.run(time.Minute, "instance", "list"); err != nil {
			return fmt.Errorf("admin socket %s: %w", d.Socket, err)
		}
		return nil
	})
}

// stop sends SIGTERM and expects a clean exit.
func (d *hostd) stop() {
	d.t.Helper()
	d.proc.Stop()
}

// run runs a hostctl client command against the daemon; the error carries
// the exit status and both outputs.
func (d *hostd) run(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args = append(args, "--socket", d.Socket)
	cmd := exec.CommandContext(ctx, d.bin, args...)
	cmd.Env = testenv.ChildEnv([]string{"VMETA_VIRT"})
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ctx.Err() == nil {
			err = fmt.Errorf("exit status %d", ee.ExitCode())
		}
		return stdout.String(), fmt.Errorf("`hostctl %s`: %w\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// ctl runs a client command and fails the test if it fails.
func (d *hostd) ctl(args ...string) string {
	d.t.Helper()
	out, err := d.run(2*time.Minute, args...)
	if err != nil {
		d.t.Fatal(err)
	}
	return out
}

// ctlJSON runs a client command with --output json and decodes its
// answer into v.
func (d *hostd) ctlJSON(v any, args ...string) {
	d.t.Helper()
	out := d.ctl(append(args, "--output", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		d.t.Fatalf("hostctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
