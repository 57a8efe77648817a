package testenv

import (
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Process is a long-running child of a test (a daemon such as
// `hostctl serve` or vmeta-metadata): started with its output captured,
// polled until it is ready, and stopped with SIGTERM, expecting a clean
// exit. Its messages name it by the name given to StartProcess. A Process
// is used from the test's goroutine only; the nil *Process has no output
// and stops as a stopped one.
type Process struct {
	// StopTimeout is how long Stop waits after SIGTERM before it kills
	// the process; 15s when zero.
	StopTimeout time.Duration

	t       testing.TB
	name    string
	cmd     *exec.Cmd
	out     *SyncBuffer
	done    chan struct{}
	waitErr error
	stopped bool
}

// StartProcess starts cmd with its stdout and stderr collected (Output)
// and, when cmd sets no SysProcAttr, the kernel told to kill it should
// the test binary die without running its cleanups. name ("hostctl
// serve") is how messages refer to it. The caller stops it (Stop),
// typically in a t.Cleanup.
func StartProcess(t testing.TB, name string, cmd *exec.Cmd) (*Process, error) {
	p := &Process{t: t, name: name, cmd: cmd, out: &SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = procAttr()
	}
	if err := cmd.Start(); err != nil {
		p.stopped = true
		close(p.done)
		return p, err
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Output is what the process has written to stdout and stderr so far.
func (p *Process) Output() string {
	if p == nil {
		return ""
	}
	return p.out.String()
}

// Exited is closed once the process has exited; Err is then its wait
// error.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Err is the process's wait error (nil for a clean exit); it is valid
// once Exited is closed.
func (p *Process) Err() error { return p.waitErr }

// WaitReady calls ready every interval until it returns nil. If the
// process exits first, it returns an error saying so (and Stop then does
// nothing); if timeout passes first, it stops the process and returns
// ready's last error.
func (p *Process) WaitReady(timeout, interval time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.done:
			p.stopped = true
			if p.waitErr == nil {
				return fmt.Errorf("%s exited before answering", p.name)
			}
			return fmt.Errorf("%s exited before answering: %w", p.name, p.waitErr)
		default:
		}
		err := ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			p.Stop()
			return fmt.Errorf("%s did not answer within %s: %w", p.name, timeout, err)
		}
		time.Sleep(interval)
	}
}

// Stop sends SIGTERM and waits for the process to exit, killing it if it
// has not within StopTimeout; anything but a clean exit (status 0) fails
// the test. Stopping a stopped process does nothing.
func (p *Process) Stop() {
	if p == nil || p.stopped {
		return
	}
	p.t.Helper()
	p.stopped = true
	within := p.StopTimeout
	if within == 0 {
		within = 15 * time.Second
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(within):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Errorf("%s did not exit within %s of SIGTERM; killed it", p.name, within)
		return
	}
	if p.waitErr != nil {
		p.t.Errorf("%s exited with %v after SIGTERM, want a clean exit", p.name, p.waitErr)
	}
}

// Kill sends SIGKILL (no cleanup in the process: a crash) and waits for
// the process to exit; the exit status is not checked. Stop does nothing
// afterwards.
func (p *Process) Kill() {
	if p == nil || p.stopped {
		return
	}
	p.stopped = true
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}
