package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/testenv"
)

// Background is Run started in the background by a test (this package's
// or daemon_test's), with its output.
type Background struct {
	Stdout, Stderr *testenv.SyncBuffer
	cancel         context.CancelFunc
	done           chan struct{} // closed when Run has returned err
	err            error
}

// RunInBackground starts Run(cfg) in the background; its output (cfg's
// Stdout and Stderr are replaced) goes to the returned Background's
// buffers.
func RunInBackground(cfg Config) *Background {
	b := &Background{Stdout: &testenv.SyncBuffer{}, Stderr: &testenv.SyncBuffer{}, done: make(chan struct{})}
	cfg.Stdout, cfg.Stderr = b.Stdout, b.Stderr
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	go func() {
		b.err = Run(ctx, cfg)
		close(b.done)
	}()
	return b
}

// Stop ends Run and returns its error; again, the same error.
func (b *Background) Stop() error {
	b.cancel()
	<-b.done
	return b.err
}

// StopAtEnd stops Run when the test ends; an error from it fails the
// test.
func (b *Background) StopAtEnd(t *testing.T) {
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Errorf("serve: %v\n%s", err, b.Stderr.String())
		}
	})
}

// WaitFor calls ready every 10ms until it returns nil. When Run returns
// first, or ready still fails after timeout, it stops Run and fails the
// test naming what it waited for, ready's last error and Run's output.
func (b *Background) WaitFor(t *testing.T, timeout time.Duration, what string, ready func() error) {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; {
		err := ready()
		if err == nil {
			return
		}
		select {
		case <-b.done:
			t.Fatalf("serve ended before %s: %v (last: %v)\n%s\n%s", what, b.err, err, b.Stderr.String(), b.Stdout.String())
		default:
		}
		if time.Now().After(deadline) {
			b.Stop()
			t.Fatalf("no %s after %s: %v\n%s\n%s", what, timeout, err, b.Stderr.String(), b.Stdout.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
