package qcow2

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/vmeta/vmeta/internal/testenv"
)

// sizes the tests write: qemu-img's sector rounding (1, 1000), one L1
// entry and several, and the largest L1 table of one cluster.
var sizes = []int64{0, 1, 512, 1000, 1 << 20, 16 << 20, 64 << 20, 512 << 20, 512<<20 + 1, 1 << 30, 100 << 30, 1 << 40, MaxBlank - 511, MaxBlank}

// TestCreateMatchesQemuImg: Create writes, byte for byte, the file the
// real `qemu-img create -f qcow2 PATH SIZE` writes (what hostctl ran for
// every blank disk before), with the same mode, and qemu-img's check and
// info find it consistent, of the size asked.
func TestCreateMatchesQemuImg(t *testing.T) {
	qemuImg := testenv.LookPath(t, "qemu-img")
	dir := t.TempDir()
	for _, size := range sizes {
		want, got := filepath.Join(dir, "want.qcow2"), filepath.Join(dir, "got.qcow2")
		if out, err := exec.Command(qemuImg, "create", "-q", "-f", "qcow2", want, strconv.FormatInt(size, 10)).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img create %d: %v: %s", size, err, out)
		}
		if err := Create(got, size); err != nil {
			t.Fatalf("Create(%d): %v", size, err)
		}
		w, _ := os.ReadFile(want)
		g, _ := os.ReadFile(got)
		if !bytes.Equal(w, g) {
			i := 0
			for i < min(len(w), len(g)) && w[i] == g[i] {
				i++
			}
			t.Errorf("size %d: Create wrote %d bytes, qemu-img %d; first difference at %#x", size, len(g), len(w), i)
		}
		if img, err := Image(size); err != nil || !bytes.Equal(img, g) {
			t.Errorf("size %d: Image is not the file Create wrote (%v)", size, err)
		}
		wi, _ := os.Stat(want)
		gi, _ := os.Stat(got)
		if wi.Mode() != gi.Mode() {
			t.Errorf("size %d: mode %v, qemu-img's %v", size, gi.Mode(), wi.Mode())
		}
		if out, err := exec.Command(qemuImg, "check", "-q", "-f", "qcow2", got).CombinedOutput(); err != nil {
			t.Errorf("size %d: qemu-img check: %v: %s", size, err, out)
		}
		out, err := exec.Command(qemuImg, "info", "--output=json", "-f", "qcow2", got).Output()
		if err != nil {
			t.Fatalf("size %d: qemu-img info: %v", size, err)
		}
		var info struct {
			VirtualSize int64 `json:"virtual-size"`
		}
		if err := json.Unmarshal(out, &info); err != nil || info.VirtualSize != (size+511)&^511 {
			t.Errorf("size %d: qemu-img info: virtual size %d (%v)", size, info.VirtualSize, err)
		}
		os.Remove(want)
		os.Remove(got)
	}
}

// TestCreateWritesQemuUsableImage: QEMU's block layer writes to and reads
// from an image Create made (qemu-io), and qemu-img check finds the
// allocation it made consistent.
func TestCreateWritesQemuUsableImage(t *testing.T) {
	qemuImg := testenv.LookPath(t, "qemu-img")
	qemuIO := testenv.LookPath(t, "qemu-io")
	p := filepath.Join(t.TempDir(), "disk.qcow2")
	if err := Create(p, 64<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(qemuIO, "-f", "qcow2", "-c", "write -P 0x5a 32M 128k", p).CombinedOutput(); err != nil {
		t.Fatalf("qemu-io write: %v: %s", err, out)
	}
	if out, err := exec.Command(qemuIO, "-f", "qcow2", "-c", "read -P 0x5a 32M 128k", p).CombinedOutput(); err != nil || bytes.Contains(out, []byte("Pattern verification failed")) {
		t.Fatalf("qemu-io read: %v: %s", err, out)
	}
	if out, err := exec.Command(qemuImg, "check", "-f", "qcow2", p).CombinedOutput(); err != nil {
		t.Errorf("qemu-img check after a write: %v: %s", err, out)
	}
}

// TestCreateRefuses: a size out of range is refused, naming it, and no
// file is made; an existing file is replaced, as qemu-img create does.
func TestCreateRefuses(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int64{-1, MaxBlank + 1, 1 << 50} {
		p := filepath.Join(dir, "bad.qcow2")
		err := Create(p, size)
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(strconv.FormatInt(size, 10))) {
			t.Errorf("Create(%d): %v, want an error naming the size", size, err)
		}
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("Create(%d) left a file: %v", size, err)
		}
	}
	p := filepath.Join(dir, "old.qcow2")
	if err := os.WriteFile(p, bytes.Repeat([]byte("x"), 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Create(p, 1<<20); err != nil {
		t.Fatal(err)
	}
	want, _ := Image(1 << 20)
	if got, _ := os.ReadFile(p); !bytes.Equal(got, want) {
		t.Errorf("an existing file was not replaced by the image (%d bytes)", len(got))
	}
	if err := Create(filepath.Join(dir, "missing", "d.qcow2"), 1<<20); err == nil {
		t.Error("Create in a missing directory succeeded")
	}
}
