package devices

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Outcomes of a cleanup hook run (HookResult.Outcome).
const (
	HookOK      = "ok"
	HookFailed  = "failed"
	HookTimeout = "timeout"
	HookGarbage = "garbage"
	HookError   = "error"
	HookSkipped = "skipped"
)

// DefaultHookTimeout bounds one cleanup hook run.
const DefaultHookTimeout = 5 * time.Minute

// MaxRunningHooks is how many cleanup hooks run at once; a release while
// that many run is reported as skipped (the device still needs cleaning,
// and says so: the hook is a convenience, the record is the truth).
const MaxRunningHooks = 8

// hookOutputLimit is how much of a hook's stdout and stderr is kept.
const hookOutputLimit = 4096

// Hook runs the operator's cleanup command (hostctl serve --cleanup-hook)
// when a burned device is released: `/bin/sh -c CMD`, the device record
// as JSON on stdin, in its own process group, killed with the group after
// the timeout. It never blocks hostctl (it runs in the background, at most
// MaxRunningHooks at once) and is never retried: every run ends in one
// reported outcome. A hook may print one JSON object on stdout
// ({"message": "..."}); anything else on stdout is reported as garbage.
type Hook struct {
	Command string
	Timeout time.Duration

	sem    chan struct{}
	wg     sync.WaitGroup
	base   context.Context
	stop   context.CancelFunc
	report func(Device, HookResult)
	now    func() time.Time
}

// NewHook returns a hook running command (timeout 0: DefaultHookTimeout).
func NewHook(command string, timeout time.Duration) (*Hook, error) {
	if strings.TrimSpace(command) == "" {
		return nil, errors.New("cleanup hook: empty command")
	}
	if timeout <= 0 {
		timeout = DefaultHookTimeout
	}
	base, stop := context.WithCancel(context.Background())
	return &Hook{Command: command, Timeout: timeout, sem: make(chan struct{}, MaxRunningHooks), now: time.Now, base: base, stop: stop}, nil
}

// Stop kills the hooks still running (each is reported as stopped) and
// waits for their reports until ctx is done. Run after Stop reports
// every hook as stopped.
func (h *Hook) Stop(ctx context.Context) {
	h.stop()
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// Run starts the hook for d in the background.
func (h *Hook) Run(d Device) {
	report := h.report
	if report == nil {
		report = func(Device, HookResult) {}
	}
	select {
	case h.sem <- struct{}{}:
	default:
		report(d, HookResult{Outcome: HookSkipped, Message: fmt.Sprintf("%d cleanup hooks already running", MaxRunningHooks), At: h.now().UTC()})
		return
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer func() { <-h.sem }()
		res := h.run(d)
		report(d, res)
	}()
}

// Wait waits for the hooks that are running (at shutdown, and in tests).
func (h *Hook) Wait() { h.wg.Wait() }

type limitedBuffer struct {
	bytes.Buffer
	cut bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := hookOutputLimit - b.Len(); room < len(p) {
		b.cut = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

func (h *Hook) run(d Device) HookResult {
	res := func(outcome, format string, args ...any) HookResult {
		return HookResult{Outcome: outcome, Message: fmt.Sprintf(format, args...), At: h.now().UTC()}
	}
	body, err := encodeDevice(d)
	if err != nil {
		return res(HookError, "encode the device: %v", err)
	}
	ctx, cancel := context.WithTimeout(h.base, h.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", h.Command)
	cmd.Stdin = bytes.NewReader(body)
	var stdout, stderr limitedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// Children that keep the output pipes open do not hold Wait forever.
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	tail := strings.TrimSpace(stderr.String())
	switch {
	case h.base.Err() != nil:
		return res(HookError, "killed: hostctl is stopping; stderr: %q", tail)
	case ctx.Err() != nil:
		return res(HookTimeout, "killed after %s; stderr: %q", h.Timeout, tail)
	case err != nil:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return res(HookFailed, "%v; stderr: %q", err, tail)
		}
		return res(HookError, "run: %v", err)
	}
	out := bytes.TrimSpace(stdout.Bytes())
	if len(out) == 0 {
		return res(HookOK, "")
	}
	var reply struct {
		Message string `json:"message"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	if stdout.cut || dec.Decode(&reply) != nil || dec.More() || out[0] != '{' {
		return res(HookGarbage, "stdout is not one JSON object: %q", truncate(string(out), 200))
	}
	return res(HookOK, "%s", truncate(reply.Message, 500))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
