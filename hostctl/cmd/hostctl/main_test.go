package main

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/testenv"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildOut  []byte
	buildDir  string
)

// hostctlBinary builds this command once for the package's tests, without
// the race detector (whose shadow memory does not fit under a memory
// cap), and returns its path.
func hostctlBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "hostctl-bin-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "hostctl")
		cmd := exec.Command(testenv.GoTool(), "build", "-o", binPath, ".")
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("go build: %v\n%s", buildErr, buildOut)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// memoryCap is the address space the binary gets under prlimit: a Go
// program needs about 1 GiB of it to start; reading /dev/zero without a
// limit exhausts the rest within a second or two.
const memoryCap = 2 << 30

// TestFileLimits runs the real binary, under a memory cap, on every file
// the CLI reads, given a file without an end (/dev/zero) or over the
// limit: each fails at once with an error naming the file and the limit
// (the daemon's for a spec, 1 MiB), where it used to read until the
// kernel killed it (issue 21, item 4).
func TestFileLimits(t *testing.T) {
	bin := hostctlBinary(t)
	prlimit := testenv.LookPath(t, "prlimit")
	dir := t.TempDir()
	sock := filepath.Join(dir, "absent.sock") // nothing is ever sent
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, bytes.Repeat([]byte("#"), 1<<20+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string // a file for standard input
		code  int
		want  []string
	}{
		{"spec /dev/zero", []string{"instance", "apply", "-f", "/dev/zero"}, "", 1, []string{"spec /dev/zero", "1 MiB (1048576 bytes)"}},
		{"spec on stdin", []string{"instance", "apply", "-f", "-"}, "/dev/zero", 1, []string{"spec (standard input)", "1 MiB (1048576 bytes)"}},
		{"spec file over the limit", []string{"instance", "apply", "-f", big}, "", 1, []string{"spec " + big, "1 MiB (1048576 bytes)"}},
		{"payload /dev/zero", []string{"secret", "create", "--payload-file", "/dev/zero"}, "", 1, []string{"--payload-file /dev/zero", "1026 bytes"}},
		{"payload on stdin", []string{"secret", "create", "--payload-file", "-"}, "/dev/zero", 1, []string{"--payload-file (standard input)", "1026 bytes"}},
		{"config /dev/zero", []string{"serve", "--config", "/dev/zero"}, "", 2, []string{"config file /dev/zero", "1 MiB (1048576 bytes)"}},
		{"image /dev/zero", []string{"image", "import", "/dev/zero", "--name", "x"}, "", 2, []string{"/dev/zero is not a regular file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--as=" + strconv.Itoa(memoryCap), bin}, tc.args...)
			cmd := exec.Command(prlimit, append(args, "--socket", sock)...)
			cmd.Env = testenv.ChildEnv([]string{"VMETA_SOCKET", "VMETA_API", "VMETA_TOKEN"})
			if tc.stdin != "" {
				f, err := os.Open(tc.stdin)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				cmd.Stdin = f
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			code := 0
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code {
				t.Errorf("hostctl %s: exit %d, want %d:\n%s", strings.Join(tc.args, " "), code, tc.code, tail(stderr.String()))
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("hostctl %s: stderr lacks %q:\n%s", strings.Join(tc.args, " "), w, tail(stderr.String()))
				}
			}
		})
	}
}

// TestSignalStopsClient: a client command waiting on a daemon that never
// answers stops on SIGTERM and on SIGINT, at once, with one line saying
// so and the shell's exit status (128 + the signal), where it used to
// keep waiting (issue 21, item 4). The server only accepts: the signal is
// sent once the command is connected and waiting, and the test waits for
// the process to exit.
func TestSignalStopsClient(t *testing.T) {
	bin := hostctlBinary(t)
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
		name string
		args []string
	}{
		{syscall.SIGTERM, 143, "SIGTERM", []string{"instance", "list"}},
		{syscall.SIGINT, 130, "SIGINT", []string{"instance", "show", "web-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "hung.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			accepted := make(chan net.Conn, 1)
			go func() {
				c, err := ln.Accept()
				if err == nil {
					accepted <- c // held open, never answered
				}
			}()
			cmd := exec.Command(bin, append(tc.args, "--socket", sock)...)
			cmd.Env = testenv.ChildEnv([]string{"VMETA_SOCKET", "VMETA_API", "VMETA_TOKEN"})
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case c := <-accepted:
				defer c.Close()
			case err := <-exited:
				t.Fatalf("hostctl exited before it was connected: %v\n%s", err, stderr.String())
			case <-time.After(time.Minute):
				cmd.Process.Kill()
				t.Fatal("hostctl never connected")
			}
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != tc.code {
					t.Errorf("after %s: %v (exit %d), want exit %d\n%s", tc.name, err, exitCode(err), tc.code, stderr.String())
				}
				if want := "stopped by " + tc.name; !strings.Contains(stderr.String(), want) || strings.Count(stderr.String(), "\n") != 1 {
					t.Errorf("after %s: stderr %q, want one line with %q", tc.name, stderr.String(), want)
				}
			case <-time.After(time.Minute):
				cmd.Process.Kill()
				<-exited
				t.Fatalf("hostctl did not exit within a minute of %s\n%s", tc.name, stderr.String())
			}
		})
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return 0
}

// tail is the end of a long output (a Go runtime's out-of-memory trace).
func tail(s string) string {
	if len(s) > 2000 {
		return "…" + s[len(s)-2000:]
	}
	return s
}

// TestSignalStopsServe: SIGTERM shuts the daemon down, and that is a
// success (exit 0), not a command stopped halfway: systemd's stop.
func TestSignalStopsServe(t *testing.T) {
	bin := hostctlBinary(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "serve", "--data-dir", filepath.Join(dir, "data"), "--virt", "none",
		"--metadata-listen", "127.0.0.1:0", "--socket", filepath.Join(dir, "s.sock"))
	cmd.Env = testenv.ChildEnv([]string{"VMETA_SOCKET", "VMETA_API", "VMETA_TOKEN"})
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	serving := make(chan bool, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stderr)
		said := false
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if !said && strings.Contains(sc.Text(), "hostctl serving") {
				said = true
				serving <- true
			}
		}
		if !said {
			serving <- false
		}
	}()
	if !<-serving {
		<-copied
		cmd.Wait()
		t.Fatalf("serve did not start:\n%s", log.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-copied
	if err := cmd.Wait(); err != nil {
		t.Errorf("serve after SIGTERM: %v, want exit 0\n%s", err, log.String())
	}
}
