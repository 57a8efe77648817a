package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestWriteFileReplacesWholeWithMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new content"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "new content" {
		t.Fatalf("content = %q, %v", got, err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v, want 0600", st.Mode().Perm())
	}
	assertNoTemps(t, dir)
}

func TestWriteFailureLeavesOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, 0o644, func(f *os.File) error {
		if _, err := f.Write([]byte("half")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want boom naming %s", err, path)
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Fatalf("content = %q, want old", got)
	}
	assertNoTemps(t, dir)
}

func TestWriteSeeks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "img")
	err := Write(path, 0o640, func(f *os.File) error {
		if _, err := f.WriteAt([]byte("B"), 4); err != nil {
			return err
		}
		_, err := f.WriteAt([]byte("A"), 0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "A\x00\x00\x00B" {
		t.Fatalf("content = %q", got)
	}
}

func TestWriteIfChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules")
	for i, tc := range []struct {
		data []byte
		perm fs.FileMode
		want bool
	}{
		{[]byte("a"), 0o644, true},
		{[]byte("a"), 0o644, false},
		{[]byte("a"), 0o600, true}, // mode differs: rewrite
		{[]byte("b"), 0o600, true},
	} {
		changed, err := WriteIfChanged(path, tc.data, tc.perm)
		if err != nil || changed != tc.want {
			t.Fatalf("step %d: changed=%v err=%v, want %v", i, changed, err, tc.want)
		}
	}
}

func TestWriteToDirectoryNameRefused(t *testing.T) {
	err := WriteFile(t.TempDir()+"/", []byte("x"), 0o644)
	if err == nil || !strings.Contains(err.Error(), "directory") {
		t.Fatalf("err = %v", err)
	}
}

func TestCreateExclusiveOneWinner(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = CreateExclusive(path, []byte(strings.Repeat(string(rune('a'+i)), 64)), 0o600)
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, fs.ErrExist):
			t.Fatalf("unexpected error %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d writers created the file, want exactly 1", won)
	}
	got, _ := os.ReadFile(path)
	if len(got) != 64 || strings.Count(string(got), string(got[0])) != 64 {
		t.Fatalf("file mixes writers: %q", got)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v", st.Mode().Perm())
	}
	assertNoTemps(t, dir)
}

func assertNoTemps(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
}
