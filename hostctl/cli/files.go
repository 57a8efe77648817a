package cli

import (
	"context"
	"fmt"
	"io"
	"os"
)

// Limits of the files the CLI reads: the daemon's own for what it is
// sent (a spec: model.MaxSpecSize, as POST /v1/instances), so that
// hostctl never holds more than it could send, and fails at once on a
// file with no end (/dev/zero) instead of growing until the kernel kills
// it.
const (
	// maxConfigFile bounds a --config file (a few kilobytes in practice).
	maxConfigFile = 1 << 20
)

// errTooLarge is a file over its limit; the message names the file and
// the limit.
type errTooLarge struct {
	what, name string
	limit      int64
}

func (e *errTooLarge) Error() string {
	return fmt.Sprintf("%s %s is larger than %s, the most hostctl reads", e.what, e.name, sizeText(e.limit))
}

// sizeText is "1 MiB (1048576 bytes)" for a whole number of KiB or MiB,
// "N bytes" otherwise.
func sizeText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB (%d bytes)", n>>20, n)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB (%d bytes)", n>>10, n)
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}

// readFile reads the file name ("-": stdin, when there is one), what it is for the errors
// ("spec", "--payload-file"), at most limit bytes: a larger file is an
// error naming the file and the limit, found from its size when it is a
// regular file, after reading limit+1 bytes otherwise (a device, a pipe).
// The read stops when ctx is done (SIGINT or SIGTERM), also one blocked on
// a pipe or a terminal that sends nothing.
func readFile(ctx context.Context, stdin io.Reader, what, name string, limit int64) ([]byte, error) {
	if name == "-" && stdin != nil {
		return readLimited(ctx, stdin, what, "(standard input)", limit)
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > limit {
		return nil, &errTooLarge{what: what, name: name, limit: limit}
	}
	return readLimited(ctx, f, what, name, limit)
}

func readLimited(ctx context.Context, r io.Reader, what, name string, limit int64) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(r, limit+1))
		done <- result{b, err}
	}()
	select {
	case res := <-done:
		if res.err != nil {
			return nil, fmt.Errorf("read %s %s: %w", what, name, res.err)
		}
		if int64(len(res.b)) > limit {
			clear(res.b)
			return nil, &errTooLarge{what: what, name: name, limit: limit}
		}
		return res.b, nil
	case <-ctx.Done():
		// The reader is left blocked: the command ends, and the process
		// with it.
		return nil, fmt.Errorf("read %s %s: %w", what, name, context.Cause(ctx))
	}
}
