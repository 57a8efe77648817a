package cli

import (
	"context"
	"errors"
	"io"
	"strings"
	"syscall"
	"testing"
)

// TestReadFileStopsOnSignal: a read blocked on a pipe that sends nothing
// (`instance apply -f -` from a terminal or a stuck producer) returns
// when the command's context is cancelled by a signal, with the signal as
// the error's cause.
func TestReadFileStopsOnSignal(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := readFile(ctx, pr, "spec", "-", 1<<20)
		done <- err
	}()
	cancel(&Interrupt{Signal: syscall.SIGTERM})
	err := <-done
	var in *Interrupt
	if !errors.As(err, &in) || !strings.Contains(err.Error(), "spec (standard input)") {
		t.Fatalf("read cancelled by SIGTERM: %v", err)
	}
	if in.ExitCode() != 143 {
		t.Errorf("exit code %d, want 143", in.ExitCode())
	}
}

// TestReadFileLimit: exactly the limit is read; one byte more is an
// error naming the file and the limit.
func TestReadFileLimit(t *testing.T) {
	ctx := context.Background()
	if b, err := readFile(ctx, strings.NewReader(strings.Repeat("x", 1024)), "spec", "-", 1024); err != nil || len(b) != 1024 {
		t.Fatalf("at the limit: %d bytes, %v", len(b), err)
	}
	_, err := readFile(ctx, strings.NewReader(strings.Repeat("x", 1025)), "spec", "-", 1024)
	var tl *errTooLarge
	if !errors.As(err, &tl) || err.Error() != "spec (standard input) is larger than 1 KiB (1024 bytes), the most hostctl reads" {
		t.Fatalf("over the limit: %v", err)
	}
}
