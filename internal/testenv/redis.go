package testenv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// redisReadyTimeout bounds the wait for a started redis-server to answer.
const redisReadyTimeout = 10 * time.Second

// RedisServer is a private redis-server for one test: loopback only, no
// persistence (--save "" --appendonly no), its files in a t.TempDir. It is
// killed when the test ends. Stop and Start let fault tests take it away
// and bring it back on the same port (empty: nothing is persisted).
type RedisServer struct {
	t    testing.TB
	bin  string
	dir  string
	args []string
	port int
	// conf, when set, is a configuration file passed first on the command
	// line (sentinel mode needs one it can rewrite).
	conf string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// StartRedis starts a private redis-server and returns its URL
// (redis://127.0.0.1:PORT/0). See StartRedisServer.
func StartRedis(t testing.TB) (url string) {
	t.Helper()
	return StartRedisServer(t).URL()
}

// StartRedisServer starts a private redis-server on a free loopback port and
// waits until it answers PING. Without redis-server (PATH or
// /usr/bin/redis-server) the test stops through Require; a redis-server
// that does not start fails the test. Extra configuration, such as
// "--requirepass", "secret", is appended to the command line. With
// --requirepass PING is answered with an authentication error, which counts
// as up.
func StartRedisServer(t testing.TB, extraArgs ...string) *RedisServer {
	t.Helper()
	r := &RedisServer{t: t, bin: LookPath(t, "redis-server"), dir: t.TempDir(), args: extraArgs}
	t.Cleanup(r.Stop)
	var err error
	// A free port can be taken by someone else before redis-server binds
	// it; try a few.
	for range 5 {
		if r.port, err = FreePort(); err != nil {
			break
		}
		if err = r.start(); err == nil {
			return r
		}
	}
	t.Fatalf("start redis-server: %v", err)
	return nil
}

// URL returns the server's URL, database 0.
func (r *RedisServer) URL() string { return "redis://" + r.Addr() + "/0" }

// Addr returns the server's host:port.
func (r *RedisServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

// Stop kills the server (as a crash would) and waits for it to exit. It does
// nothing when the server is not running.
func (r *RedisServer) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.done
	r.cmd = nil
}

// Start starts the server again on the same port, with no data, and waits
// until it answers. It does nothing when the server is running; it fails the
// test when the server does not come up.
func (r *RedisServer) Start() {
	r.t.Helper()
	if err := r.start(); err != nil {
		r.t.Fatalf("restart redis-server: %v", err)
	}
}

func (r *RedisServer) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return nil
	}
	log := &SyncBuffer{}
	args := []string{
		"--port", strconv.Itoa(r.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", r.dir,
		"--daemonize", "no",
		"--logfile", "",
		"--loglevel", "warning",
	}
	if r.conf != "" {
		args = append([]string{r.conf}, args...)
	}
	cmd := exec.Command(r.bin, append(args, r.args...)...)
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", r.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	if err := waitRedis(r.Addr(), done); err != nil {
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s on port %d: %w; its output:\n%s", r.bin, r.port, err, log.String())
	}
	r.cmd, r.done = cmd, done
	return nil
}

// waitRedis polls addr with PING until it answers +PONG, the process exits
// (done) or redisReadyTimeout passes. Polls start 2 ms apart and back off to
// 50 ms; redis-server is usually up within a few milliseconds.
func waitRedis(addr string, done <-chan struct{}) error {
	deadline := time.Now().Add(redisReadyTimeout)
	delay := 2 * time.Millisecond
	var last error
	for {
		if last = ping(addr); last == nil {
			return nil
		}
		select {
		case <-done:
			return errors.New("exited before answering")
		case <-time.After(delay):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer to PING after %s: %w", redisReadyTimeout, last)
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// ping sends one inline PING command and expects +PONG, or the -NOAUTH
// error of a server with a password (which is up all the same).
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line = strings.TrimSpace(line); line != "+PONG" && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ClosedAddr returns a loopback host:port nobody listens on (free a
// moment ago): a dial to it is refused.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// SyncBuffer is a bytes.Buffer safe for concurrent use: a child process's
// output (exec copies into it from another goroutine) or a log read while
// it is written.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
