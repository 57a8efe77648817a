package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// startTimeout bounds the wait for a started server to accept connections.
const startTimeout = 30 * time.Second

// proc is a server process the benchmark started. Its output goes to a
// log file in the run's temporary directory, shown when it fails.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
	// metrics is a URL where the process serves Prometheus text with
	// go_memstats_mallocs_total (its heap allocations so far), "" if none.
	metrics string
}

// procs are all the processes of one run; stopAll ends them (on success,
// error and SIGINT alike).
type procs struct {
	mu   sync.Mutex
	list []*proc
}

// spawn describes a process to start.
type spawn struct {
	name string
	log  string // file for its output
	bin  string
	args []string
	// discardStdout sends standard output to /dev/null (Hegel logs every
	// request there), keeping standard error in log.
	discardStdout bool
}

// start runs a process in its own process group.
func (ps *procs) start(s spawn) (*proc, error) {
	out, err := os.Create(s.log)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", s.name, err)
	}
	defer out.Close() // the child has its own copy
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = out, out
	if s.discardStdout {
		cmd.Stdout = nil // the null device
	}
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", s.name, err)
	}
	p := &proc{name: s.name, cmd: cmd, log: s.log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
	return p, nil
}

// pid is the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the process to end (SIGTERM to its group), then kills the
// group when it has not ended after a few seconds.
func (p *proc) stop() {
	if p.exited() {
		return
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
	}
}

// stopAll stops every process, the last started first.
func (ps *procs) stopAll() {
	ps.mu.Lock()
	list := ps.list
	ps.list = nil
	ps.mu.Unlock()
	for i := len(list) - 1; i >= 0; i-- {
		list[i].stop()
	}
}

// stopSome stops the given processes and forgets them.
func (ps *procs) stopSome(some ...*proc) {
	for _, p := range some {
		if p == nil {
			continue
		}
		p.stop()
		ps.mu.Lock()
		for i, q := range ps.list {
			if q == p {
				ps.list = append(ps.list[:i], ps.list[i+1:]...)
				break
			}
		}
		ps.mu.Unlock()
	}
}

// failed wraps err with the tail of the process's output.
func (p *proc) failed(err error) error {
	b, _ := os.ReadFile(p.log)
	tail := string(b)
	if len(tail) > 2000 {
		tail = "…" + tail[len(tail)-2000:]
	}
	status := "running"
	if p.exited() {
		status = fmt.Sprintf("exited: %v", p.err)
	}
	return fmt.Errorf("%s (pid %d, %s): %w; its output:\n%s", p.name, p.pid(), status, err, strings.TrimSpace(tail))
}

// waitDial waits until addr (network "tcp" or "unix") accepts a
// connection, failing when the process exits first or startTimeout passes.
func (p *proc) waitDial(ctx context.Context, network, addr string) error {
	deadline := time.Now().Add(startTimeout)
	delay := 5 * time.Millisecond
	for {
		c, err := net.DialTimeout(network, addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return p.failed(fmt.Errorf("no listener on %s after %s: %w", addr, startTimeout, err))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.done:
			return p.failed(errors.New("exited before listening"))
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// freeAddr returns a loopback host:port that was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, 100 on
// every Linux architecture the benchmark runs on.
const userHZ = 100

// processCPU returns the CPU time (user + system, all threads) the
// process pid has spent so far, from /proc/<pid>/stat: the process's own
// rusage, as the kernel accounts it, whatever else loads the machine.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("CPU time of pid %d: %w", pid, err)
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime (fields 14 and 15) from a
// /proc/<pid>/stat line. The command name (field 2) may hold spaces and
// parentheses, so fields are counted after its closing parenthesis.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc stat line %q", stat)
	}
	f := strings.Fields(stat[i+1:]) // from field 3 (state) on
	if len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc stat line %q", stat)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("unexpected /proc stat line %q: %w", stat, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}
