package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/testenv"
)

// Issue 21: one daemon per data directory and per host name on a shared
// store, an admin socket private from its first moment, and a store that
// does not vanish or crash the daemon silently.

// serveArgs are the flags of a `hostctl serve` that is expected to be
// refused (it never gets as far as listening).
func serveArgs(t *testing.T, dataDir, store string, extra ...string) []string {
	sockDir, err := os.MkdirTemp("", "vmeta-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	args := []string{"serve", "--data-dir", dataDir, "--socket", filepath.Join(sockDir, "hostctl.sock"), "--metadata-listen", "127.0.0.1:0", "--virt", "none"}
	if store != "" {
		args = append(args, "--store", store)
	}
	return append(args, extra...)
}

// expectRefused runs `hostctl serve` and wants it to exit non-zero at
// once, its stderr containing every want and no panic.
func expectRefused(t *testing.T, args []string, want ...string) result {
	t.Helper()
	r := hostctl(t, nil, args...)
	if r.code == 0 {
		t.Fatalf("hostctl serve was not refused:\n%s", r)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("hostctl serve refused without %q:\n%s", w, r)
		}
	}
	if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
		t.Errorf("hostctl serve panicked:\n%s", r)
	}
	return r
}

// TestOneDaemonPerDataDirAndHostName: two `hostctl serve` on one Redis
// store are refused when they share a data directory (the lock on the
// directory, whatever the store) or a host name (the host's lease in the
// store), with a message naming the holder; a cleanly stopped host frees
// its name at once, and a host killed -9 restarts on its own data
// directory without waiting for its heartbeat to age.
func TestOneDaemonPerDataDirAndHostName(t *testing.T) {
	t.Parallel()
	redis := testenv.StartRedis(t)
	d1 := startDaemon(t, daemonOptions{Store: redis, Args: append(hostArgs("h1"), "--virt", "none")})

	// The same data directory, whatever host name it is given.
	r := expectRefused(t, serveArgs(t, d1.DataDir, redis, hostArgs("h1")...), "data directory in use", "hostctl.lock", "is locked by hostctl pid")
	t.Logf("same data directory: %s", errorLine(r.stderr))

	// Another data directory, the same host name.
	other := t.TempDir()
	r = expectRefused(t, serveArgs(t, other, redis, hostArgs("h1")...), "host name held by another process", "host h1 is held by hostctl pid", "data directory "+d1.DataDir)
	t.Logf("same host name: %s", errorLine(r.stderr))

	// Stopped cleanly, the name is free for the other data directory…
	d1.Stop()
	d2 := startDaemon(t, daemonOptions{DataDir: other, Store: redis, Args: append(hostArgs("h1"), "--virt", "none")})
	// …and killed, the host restarts on its own data directory at once.
	d2.proc.Kill()
	startDaemon(t, daemonOptions{DataDir: other, Store: redis, Args: append(hostArgs("h1"), "--virt", "none")})
}

// errorLine is the line of a refused command's stderr that says why.
func errorLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestServeRefusesLostOrCorruptStore: a data directory that shows a store
// was used (key file, host-name, an instance's directory) next to an
// emptied or missing vmeta.db, or a Redis that came back empty, is
// refused with what was found, and --init-empty-store starts anyway; a
// vmeta.db with broken pages is refused with how to restore it, never a
// panic.
func TestServeRefusesLostOrCorruptStore(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, daemonOptions{Args: []string{"--virt", "none", "--host", "h1"}})
	d.Apply(`{"name":"web-1","addresses":["127.0.0.1"]}`)
	d.Stop()
	db := filepath.Join(d.DataDir, "vmeta.db")
	good, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	lost := []string{"the store is empty but the data directory says it was used", "key-encryption-key.json", "host-name", "instance directories", "web-1", "--init-empty-store"}
	for _, tc := range []struct {
		name   string
		damage func()
		want   []string
	}{
		{"missing", func() { os.Remove(db) }, lost},
		{"emptied", func() { os.WriteFile(db, nil, 0o600) }, lost},
		{"corrupt pages", func() {
			b := append([]byte(nil), good...)
			page := os.Getpagesize()
			for off := 2 * page; off+64 <= len(b); off += page {
				copy(b[off:off+64], strings.Repeat("\xa5", 64))
			}
			os.WriteFile(db, b, 0o600)
		}, []string{"the store file is corrupt", db, "restore it from a backup"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.damage()
			r := expectRefused(t, serveArgs(t, d.DataDir, ""), tc.want...)
			t.Logf("%s: %s", tc.name, errorLine(r.stderr))
			if err := os.WriteFile(db, good, 0o600); err != nil {
				t.Fatal(err)
			}
		})
	}
	// Restored, the instance is there.
	d = d.Restart()
	if r := d.MustCtl("instance", "list"); !strings.Contains(r.stdout, "web-1") {
		t.Errorf("after the restore: %s", r)
	}
	d.Stop()

	// The operator who means it starts over.
	os.Remove(db)
	d = startDaemon(t, daemonOptions{DataDir: d.DataDir, Args: []string{"--virt", "none", "--init-empty-store"}})
	d.Stop()

	// A Redis store that comes up empty under a host that had instances.
	redis := testenv.StartRedis(t)
	rd := startDaemon(t, daemonOptions{Store: redis, Args: []string{"--virt", "none", "--host", "h2"}})
	rd.Apply(`{"name":"web-2","addresses":["127.0.0.2"]}`)
	rd.Stop()
	empty := testenv.StartRedis(t)
	r := expectRefused(t, serveArgs(t, rd.DataDir, empty), append(lost[:4:4], "web-2", "holds nothing of host h2")...)
	t.Logf("empty Redis: %s", errorLine(r.stderr))
}

// racerEnv makes this test binary a socket racer (see runRacer) instead of
// running tests: it is started as an unprivileged user.
const racerEnv = "VMETA_E2E_SOCKET_RACER"

func init() {
	if sock := os.Getenv(racerEnv); sock != "" {
		os.Exit(runRacer(sock, os.Getenv(racerEnv+"_STOP")))
	}
}

// runRacer connects to the unix socket at sock as fast as it can until
// the file stop exists, and on every connection sends an admin request:
// "connected" when a connection was accepted, "served <status line>" when
// it was answered, "closed" when the daemon hung up. With stop == "" it
// tries once.
func runRacer(sock, stop string) int {
	fmt.Println("ready")
	for i := 0; ; i++ {
		if stop == "" && i > 0 {
			return 0
		}
		if stop != "" && i%64 == 0 {
			if _, err := os.Stat(stop); err == nil {
				return 0
			}
		}
		// Raw system calls: a tighter loop than net.Dial, to hit a
		// window of microseconds.
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			fmt.Println("socket:", err)
			return 1
		}
		if err := syscall.Connect(fd, &syscall.SockaddrUnix{Name: sock}); err != nil {
			syscall.Close(fd)
			continue
		}
		f := os.NewFile(uintptr(fd), sock)
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			fmt.Println("fileconn:", err)
			return 1
		}
		fmt.Println("connected")
		c.SetDeadline(time.Now().Add(5 * time.Second))
		body := `{"name":"racer","addresses":["127.0.0.99"]}`
		fmt.Fprintf(c, "POST /v1/instances HTTP/1.1\r\nHost: hostctl\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if strings.HasPrefix(line, "HTTP/") {
			fmt.Println("served " + strings.TrimSpace(line))
		} else {
			fmt.Println("closed", err)
		}
	}
}

// racer is a running socket racer.
type racer struct {
	cmd  *exec.Cmd
	done chan struct{}
	out  []string
}

// lines waits for the racer to exit and returns what it printed.
func (r *racer) lines() []string {
	<-r.done
	r.cmd.Wait()
	return r.out
}

// startRacer starts this test binary as uid/gid 65534 racing for sock.
func startRacer(t *testing.T, bin, sock, stop string) *racer {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{racerEnv + "=" + sock, racerEnv + "_STOP=" + stop}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("socket racer did not start: %q %v", sc.Text(), sc.Err())
	}
	r := &racer{cmd: cmd, done: make(chan struct{})}
	go func() {
		for sc.Scan() {
			r.out = append(r.out, sc.Text())
		}
		close(r.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-r.done
		cmd.Wait()
	})
	return r
}

// TestAdminSocketPrivateFromTheStart: an unprivileged process (uid 65534)
// races the admin socket's creation while `hostctl serve` runs under
// umask 000, for a bounded number of starts: no connection is served.
// Then, the socket opened to everyone by hand, the peer check still
// refuses the unprivileged peer (SO_PEERCRED) and the daemon logs it.
func TestAdminSocketPrivateFromTheStart(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		testenv.Require(t, "root", "starting a process as another user (uid 65534) needs root")
	}
	const starts = 12
	// The racer is this test binary, copied where uid 65534 can run it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := os.MkdirTemp("", "vmeta-racer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(pub) })
	if err := os.Chmod(pub, 0o777); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(pub, "racer")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	data = nil
	sock := filepath.Join(pub, "hostctl.sock")
	dataDir := t.TempDir()
	connected, served := 0, 0
	for i := range starts {
		stop := filepath.Join(pub, fmt.Sprintf("stop-%d", i))
		rc := startRacer(t, bin, sock, stop)
		cmd := exec.Command("/bin/sh", "-c", `umask 000; exec "$0" "$@"`, hostctlBin, "serve", "--data-dir", dataDir, "--socket", sock,
			"--metadata-listen", "127.0.0.1:0", "--virt", "none", "--host", "race")
		cmd.Env = testenv.ChildEnv(nil)
		p, err := testenv.StartProcess(t, "hostctl serve", cmd)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WaitReady(30*time.Second, 10*time.Millisecond, func() error {
			if r := hostctl(t, nil, "instance", "list", "--socket", sock); r.code != 0 {
				return fmt.Errorf("%s", r)
			}
			return nil
		}); err != nil {
			t.Fatalf("start %d: %v\n%s", i, err, p.Output())
		}
		// The racer finishes the request it may have in flight while the
		// daemon still runs (one that got in would be served now).
		os.WriteFile(stop, nil, 0o644)
		lines := rc.lines()
		p.Stop()
		for _, l := range lines {
			switch {
			case l == "connected":
				connected++
			case strings.HasPrefix(l, "closed"):
				t.Logf("start %d: the racer's connection was %s", i, l)
			case strings.HasPrefix(l, "served"):
				served++
				t.Errorf("start %d: the unprivileged racer was %s", i, l)
			}
		}
		if strings.Contains(p.Output(), "127.0.0.99") {
			t.Errorf("start %d: the daemon saw the racer's request:\n%s", i, p.Output())
		}
	}
	t.Logf("%d starts under umask 000: the unprivileged racer connected %d times, was served %d times", starts, connected, served)

	// The peer check alone: the socket made world-writable by hand.
	d := startDaemon(t, daemonOptions{Args: []string{"--virt", "none"}})
	if err := os.Chmod(filepath.Dir(d.Socket), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d.Socket, 0o666); err != nil {
		t.Fatal(err)
	}
	lines := startRacer(t, bin, d.Socket, "").lines()
	if len(lines) != 2 || lines[0] != "connected" || !strings.HasPrefix(lines[1], "closed") {
		t.Errorf("an unprivileged peer on a world-writable socket: %q; want connected, then closed unserved", lines)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(d.Log(), "admin socket: connection refused"); {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not log the refused peer:\n%s", d.Log())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(d.Log(), "uid=65534") {
		t.Errorf("the refusal does not name the peer:\n%s", d.Log())
	}
}
