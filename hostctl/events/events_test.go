package events

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// backends returns the streams under test: files in a temporary directory
// and a real Redis.
func backends(t *testing.T) map[string]store.Streams {
	t.Helper()
	files := NewFiles(t.TempDir())
	return map[string]store.Streams{"files": files, "redis": stores.Redis(t)}
}

func TestEmitAndRead(t *testing.T) {
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var audit bytes.Buffer
			l := New(s, "host-a", slog.New(slog.NewJSONHandler(&audit, nil)))
			const writers, each = 8, 25
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					for i := range each {
						if _, err := l.Emit(ctx, "shares", "share.attached", map[string]any{"w": w, "i": i}); err != nil {
							t.Error(err)
						}
					}
				})
			}
			wg.Wait()
			// Read it all back in pages; every event exactly once, in
			// each writer's order.
			seen := map[string]bool{}
			last := map[float64]float64{}
			after := ""
			for {
				evs, err := Read(ctx, s, "shares", after, 37, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(evs) == 0 {
					break
				}
				for _, ev := range evs {
					if ev.Host != "host-a" || ev.Type != "share.attached" || ev.Time.IsZero() {
						t.Fatalf("event %+v", ev)
					}
					var p map[string]float64
					if err := json.Unmarshal(ev.Payload, &p); err != nil {
						t.Fatal(err)
					}
					key := fmt.Sprint(p["w"], "/", p["i"])
					if seen[key] {
						t.Fatalf("event %s read twice", key)
					}
					seen[key] = true
					if prev, ok := last[p["w"]]; ok && p["i"] <= prev {
						t.Fatalf("writer %v: event %v after %v", p["w"], p["i"], prev)
					}
					last[p["w"]] = p["i"]
					after = ev.ID
				}
			}
			if len(seen) != writers*each {
				t.Fatalf("read %d events, want %d", len(seen), writers*each)
			}
			if got := strings.Count(audit.String(), `"msg":"audit event"`); got != writers*each {
				t.Fatalf("%d audit lines, want %d", got, writers*each)
			}
		})
	}
}

// TestReadWaits: a reader waiting on an empty stream gets the event
// appended after it started waiting (no sleeps: the reader is started,
// then the event is emitted, and the reader's wait is far longer than any
// machine needs).
func TestReadWaits(t *testing.T) {
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			l := New(s, "h", nil)
			first, err := l.Emit(ctx, "devices", "device.burned", "a")
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan []Event, 1)
			go func() {
				evs, err := Read(ctx, s, "devices", first.ID, 10, time.Hour)
				if err != nil {
					t.Error(err)
				}
				got <- evs
			}()
			// The reader may start before or after this append; both
			// must end with the event.
			if _, err := l.Emit(ctx, "devices", "device.released", "b"); err != nil {
				t.Fatal(err)
			}
			evs := <-got
			if len(evs) != 1 || evs[0].Type != "device.released" {
				t.Fatalf("got %+v", evs)
			}
		})
	}
}

func TestBadStreamNames(t *testing.T) {
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			for _, bad := range []string{"", "a b", "../x", "/abs", "x.y", "-x", "A"} {
				if _, err := s.Append(context.Background(), bad, []byte("{}")); err == nil {
					t.Errorf("stream %q accepted", bad)
				}
			}
		})
	}
}

// TestFilePartialLine: a crash that left half a line behind loses only
// that line; the next append starts a new line, and the half line is
// reported as not an event rather than skipped silently.
func TestFilePartialLine(t *testing.T) {
	dir := t.TempDir()
	f := NewFiles(dir)
	ctx := context.Background()
	l := New(f, "h", nil)
	if _, err := l.Emit(ctx, "s", "one", 1); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "s.jsonl")
	fh, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh.WriteString(`{"time":"2026-`) // the crash
	fh.Close()
	if evs, err := Read(ctx, f, "s", "", 10, 0); err != nil || len(evs) != 1 {
		t.Fatalf("before the next append: %v %+v", err, evs)
	}
	// A new process (a new Files) appends after the crash.
	f2 := NewFiles(dir)
	ev, err := New(f2, "h", nil).Emit(ctx, "s", "two", 2)
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID != "3" {
		t.Fatalf("ID after the partial line = %s, want 3", ev.ID)
	}
	evs, err := Read(ctx, f2, "s", "", 10, 0)
	if err == nil || !strings.Contains(err.Error(), "entry 2: not an event") {
		t.Fatalf("partial line not reported: %v", err)
	}
	if len(evs) != 2 || evs[0].Type != "one" || evs[1].Type != "two" {
		t.Fatalf("events %+v", evs)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
}
