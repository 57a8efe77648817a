package events

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/vmeta/vmeta/internal/store"
)

// Files keeps streams as append-only JSON-lines files, one per stream
// (DIR/<stream>.jsonl, mode 0600): the event streams of a host on the
// embedded store. An entry's ID is its line number (1 for the first).
// Each append is one write(2) of a whole line on a file opened with
// O_APPEND, then fsync, so a crash leaves at most a partial last line,
// which readers ignore until it is complete and the next append starts
// on a new line.
type Files struct {
	dir string

	mu     sync.Mutex
	lines  map[string]int64 // lines per stream, counted on first use
	notify chan struct{}    // closed and replaced on every append
}

var _ store.Streams = (*Files)(nil)

// NewFiles returns the streams kept in dir (created, 0700, on the first
// append).
func NewFiles(dir string) *Files {
	return &Files{dir: dir, lines: map[string]int64{}, notify: make(chan struct{})}
}

func (f *Files) path(stream string) (string, error) {
	if err := store.CheckStream(stream); err != nil {
		return "", err
	}
	return filepath.Join(f.dir, stream+".jsonl"), nil
}

// Append writes payload (one line of JSON, no newline) to the stream's
// file.
func (f *Files) Append(_ context.Context, stream string, payload []byte) (string, error) {
	if bytes.IndexByte(payload, '\n') >= 0 {
		return "", fmt.Errorf("append to stream %s: payload contains a newline", stream)
	}
	p, err := f.path(stream)
	if err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return "", fmt.Errorf("append to stream %s: %w", stream, err)
	}
	n, ok := f.lines[stream]
	if !ok {
		if n, err = countLines(p); err != nil {
			return "", fmt.Errorf("append to stream %s: %w", stream, err)
		}
	}
	fh, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return "", fmt.Errorf("append to stream %s: %w", stream, err)
	}
	defer fh.Close()
	// A partial last line left by a crash is ended first, so this entry
	// starts a line of its own (the partial one then fails to parse and
	// is reported by Read).
	line := make([]byte, 0, len(payload)+2)
	if partial, err := endsPartial(fh); err != nil {
		return "", fmt.Errorf("append to stream %s: %w", stream, err)
	} else if partial {
		line = append(line, '\n')
		n++
	}
	line = append(append(line, payload...), '\n')
	if _, err := fh.Write(line); err != nil {
		delete(f.lines, stream) // recount next time: the write may be partial
		return "", fmt.Errorf("append to stream %s: %w", stream, err)
	}
	if err := fh.Sync(); err != nil {
		delete(f.lines, stream)
		return "", fmt.Errorf("append to stream %s: sync: %w", stream, err)
	}
	n++
	f.lines[stream] = n
	close(f.notify)
	f.notify = make(chan struct{})
	return strconv.FormatInt(n, 10), nil
}

// endsPartial reports whether the file's last byte is not a newline.
func endsPartial(fh *os.File) (bool, error) {
	st, err := fh.Stat()
	if err != nil || st.Size() == 0 {
		return false, err
	}
	var b [1]byte
	if _, err := fh.ReadAt(b[:], st.Size()-1); err != nil {
		return false, err
	}
	return b[0] != '\n', nil
}

// countLines counts the complete lines of the file at p (0 if missing).
func countLines(p string) (int64, error) {
	fh, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	var n int64
	buf := make([]byte, 64<<10)
	for {
		k, err := fh.Read(buf)
		n += int64(bytes.Count(buf[:k], []byte{'\n'}))
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// ReadStream returns up to limit complete lines after line number after,
// waiting up to wait for an append by this process when there are none.
// (Appends by another process are seen on the next call.)
func (f *Files) ReadStream(ctx context.Context, stream, after string, limit int, wait time.Duration) ([]store.StreamEntry, error) {
	p, err := f.path(stream)
	if err != nil {
		return nil, err
	}
	skip := int64(0)
	if after != "" {
		if skip, err = strconv.ParseInt(after, 10, 64); err != nil || skip < 0 {
			return nil, fmt.Errorf("read stream %s: ID %q: not a line number", stream, after)
		}
	}
	if limit <= 0 {
		limit = 100
	}
	var deadline <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		deadline = t.C
	}
	for {
		f.mu.Lock()
		notify := f.notify
		f.mu.Unlock()
		out, err := readLines(p, skip, limit)
		if err != nil || len(out) > 0 || wait <= 0 {
			if err != nil {
				err = fmt.Errorf("read stream %s: %w", stream, err)
			}
			return out, err
		}
		select {
		case <-notify:
		case <-deadline:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func readLines(p string, skip int64, limit int) ([]store.StreamEntry, error) {
	fh, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	rd := bufio.NewReaderSize(fh, 64<<10)
	var out []store.StreamEntry
	for n := int64(1); len(out) < limit; n++ {
		line, err := rd.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return out, nil // a partial last line is not an entry yet
		}
		if err != nil {
			return out, err
		}
		if n <= skip {
			continue
		}
		out = append(out, store.StreamEntry{ID: strconv.FormatInt(n, 10), Payload: bytes.TrimSuffix(line, []byte{'\n'})})
	}
	return out, nil
}
