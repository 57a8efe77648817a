package bolt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// corruptibleFile writes a store with enough records to fill many pages
// and closes it; it returns the file and its page size.
func corruptibleFile(t *testing.T) (string, int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "vmeta.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 300 {
		if _, err := s.PutRecord(ctx, fmt.Sprintf("test/%04d", i), []byte(strings.Repeat("v", 200)), -1); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path, os.Getpagesize()
}

// TestOpenRefusesCorruptFile: a file with broken pages makes Open return
// ErrCorrupt with a message that says how to restore, never a panic (a
// panic here fails the whole test binary).
func TestOpenRefusesCorruptFile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt func(t *testing.T, f *os.File, page int, size int64)
	}{
		{"data page header", func(t *testing.T, f *os.File, page int, size int64) {
			// The pages after the meta pages and the freelist: branch
			// and leaf pages of the buckets.
			garbage := []byte(strings.Repeat("\xa5", page))
			for p := int64(4); p*int64(page) < size; p += 3 {
				if _, err := f.WriteAt(garbage[:64], p*int64(page)); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"both meta pages", func(t *testing.T, f *os.File, page int, size int64) {
			for p := range 2 {
				if _, err := f.WriteAt([]byte(strings.Repeat("\x5a", page)), int64(p*page)); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"truncated", func(t *testing.T, f *os.File, page int, size int64) {
			if err := f.Truncate(int64(page) + 100); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, page := corruptibleFile(t)
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			fi, _ := f.Stat()
			tc.corrupt(t, f, page, fi.Size())
			f.Close()
			s, err := Open(path)
			if err == nil {
				// bbolt may find nothing at open when the broken pages
				// are reached only by reads: those must not panic either.
				defer s.Close()
				_, rerr := s.Records(context.Background(), "test/")
				t.Fatalf("Open of a file with a corrupt %s succeeded (a read then: %v)", tc.name, rerr)
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "restore it from a backup") || !strings.Contains(err.Error(), path) {
				t.Fatalf("Open = %v; want ErrCorrupt naming the file and how to restore it", err)
			}
			t.Logf("%s: %v", tc.name, err)
		})
	}
}
