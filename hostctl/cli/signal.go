package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Interrupt is the cause of a context SignalContext cancelled: the
// signal that stopped the command.
type Interrupt struct{ Signal os.Signal }

func (e *Interrupt) Error() string { return "stopped by " + signalName(e.Signal) }

// ExitCode is the shell's convention for a command a signal stopped:
// 128 plus the signal's number (130 for SIGINT, 143 for SIGTERM).
func (e *Interrupt) ExitCode() int {
	if s, ok := e.Signal.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}

func signalName(s os.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// SignalContext returns a context that SIGINT or SIGTERM cancels with an
// *Interrupt as its cause (context.Cause); every command takes it to its
// reads and to the daemon's client, so it stops at once. After the first
// signal the signals' default action is back: a second one ends the
// process whatever it is doing. stop releases the signals.
func SignalContext(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	quit := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			signal.Reset(os.Interrupt, syscall.SIGTERM)
			cancel(&Interrupt{Signal: s})
		case <-quit:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(quit)
		cancel(context.Canceled)
	}
}

// interrupted returns the *Interrupt that cancelled ctx, or nil.
func interrupted(ctx context.Context) *Interrupt {
	var in *Interrupt
	if errors.As(context.Cause(ctx), &in) {
		return in
	}
	return nil
}

// interruptedExit reports a command a signal stopped: one short line
// (not the "context canceled" of whatever it was waiting for), and the
// conventional exit status. A command that ended well despite the signal
// (serve shut down), or failed otherwise, is reported as usual.
func interruptedExit(ctx context.Context, env Env, name string, err error) (int, bool) {
	in := interrupted(ctx)
	var cause *Interrupt
	if in == nil || err == nil || !(errors.Is(err, context.Canceled) || errors.As(err, &cause)) {
		return 0, false
	}
	fmt.Fprintf(env.Stderr, "hostctl %s: %v\n", name, in)
	return in.ExitCode(), true
}
