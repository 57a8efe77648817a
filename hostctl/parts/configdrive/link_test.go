package configdrive

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestLinkOrCopy: the medium is a hard link of the staged drive; where
// the file system cannot link (another file system), a whole copy with
// its mode, no temporary file left; an existing medium is never
// overwritten.
func TestLinkOrCopy(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "disk.config.staged")
	data := bytes.Repeat([]byte("config-2 "), 4096)
	if err := os.WriteFile(src, data, 0o640); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "disk.config.3")
	if err := linkOrCopy(src, dst); err != nil {
		t.Fatal(err)
	}
	a, _ := os.Stat(src)
	b, _ := os.Stat(dst)
	if !os.SameFile(a, b) {
		t.Error("same file system: the medium is not a hard link of the staged drive")
	}
	if err := linkOrCopy(src, dst); !errors.Is(err, fs.ErrExist) {
		t.Errorf("an existing medium: %v, want fs.ErrExist", err)
	}

	// Across file systems: a copy.
	other := "/dev/shm"
	var so, sd syscall.Stat_t
	if err := syscall.Stat(other, &so); err != nil {
		t.Skipf("copy across file systems not tested: %s: %v", other, err)
	}
	if err := syscall.Stat(dir, &sd); err != nil {
		t.Fatal(err)
	}
	if so.Dev == sd.Dev {
		t.Skipf("copy across file systems not tested: %s and %s are on one file system", other, dir)
	}
	odir, err := os.MkdirTemp(other, "configdrive-test-")
	if err != nil {
		t.Skipf("copy across file systems not tested: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(odir) })
	osrc := filepath.Join(odir, "disk.config.staged")
	if err := os.WriteFile(osrc, data, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(osrc, 0o640); err != nil {
		t.Fatal(err)
	}
	cdst := filepath.Join(dir, "disk.config.4")
	if err := linkOrCopy(osrc, cdst); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(cdst)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the copy differs (%v)", err)
	}
	if fi, _ := os.Stat(cdst); fi.Mode().Perm() != 0o640 {
		t.Errorf("the copy's mode is %v, want 0640", fi.Mode().Perm())
	}
	if err := linkOrCopy(osrc, cdst); !errors.Is(err, fs.ErrExist) {
		t.Errorf("an existing medium (copy): %v, want fs.ErrExist", err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if n := e.Name(); n != "disk.config.staged" && n != "disk.config.3" && n != "disk.config.4" {
			t.Errorf("left behind: %s", n)
		}
	}
}
