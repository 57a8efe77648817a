package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// names lists dir.
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestStaged: a staged file is written under its temporary name (with
// its mode from the start), readable by that name once finished, and put
// in place by a commit: CommitExclusive refuses an existing destination
// and leaves it as it is; Abort removes the temporary file whatever
// happened, and never the committed one.
func TestStaged(t *testing.T) {
	dir := t.TempDir()
	s, err := Stage(dir, ".import-deb-*", 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(s.Name()); err != nil || fi.Mode().Perm() != 0o640 || filepath.Dir(s.Name()) != dir {
		t.Fatalf("staged %s: %v %v", s.Name(), fi.Mode(), err)
	}
	if _, err := s.File().Write([]byte("image")); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(s.Name()); err != nil || string(b) != "image" {
		t.Fatalf("finished staged file: %q %v", b, err)
	}
	other := filepath.Join(dir, "deb.qcow2")
	if err := os.WriteFile(other, []byte("another"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitExclusive(other); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("CommitExclusive over a file: %v, want fs.ErrExist", err)
	}
	if b, _ := os.ReadFile(other); string(b) != "another" {
		t.Fatalf("the existing file changed: %q", b)
	}
	final := filepath.Join(dir, "deb.raw")
	if err := s.CommitExclusive(final); err != nil {
		t.Fatal(err)
	}
	s.Abort()
	if got := names(t, dir); !slices.Equal(got, []string{"deb.qcow2", "deb.raw"}) {
		t.Fatalf("after CommitExclusive and Abort: %q", got)
	}
	if b, err := os.ReadFile(final); err != nil || string(b) != "image" {
		t.Fatalf("committed: %q %v", b, err)
	}

	s, err = Stage(dir, ".x-*", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.File().Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(other); err != nil {
		t.Fatal(err)
	}
	s.Abort()
	if b, _ := os.ReadFile(other); string(b) != "new" {
		t.Fatalf("Commit did not replace: %q", b)
	}

	s, err = Stage(dir, ".y-*", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	s.Abort()
	if got := names(t, dir); !slices.Equal(got, []string{"deb.qcow2", "deb.raw"}) {
		t.Fatalf("after Abort: %q", got)
	}
}

// TestRename: Rename moves a staged file into place over the old one.
func TestRename(t *testing.T) {
	dir := t.TempDir()
	from, to := filepath.Join(dir, "disk.config.staged"), filepath.Join(dir, "disk.config")
	for p, c := range map[string]string{from: "new", to: "old"} {
		if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := Rename(from, to); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(to); string(b) != "new" {
		t.Fatalf("after Rename: %q", b)
	}
	if _, err := os.Stat(from); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the staged name stays: %v", err)
	}
	if err := Rename(from, to); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Rename of a missing file: %v", err)
	}
}
