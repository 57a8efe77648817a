package disks_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/hostctl/parts/disks/qcow2"
	"github.com/vmeta/vmeta/internal/testenv"
)

// TestBlankDisksWithoutQemuImg (issue 23 item 4): the part's disk maker
// writes a blank disk in Go — with a catalog whose qemu-img does not
// exist, a blank disk of every size form is made, and is the image
// `qemu-img create -f qcow2` writes (qcow2.TestCreateMatchesQemuImg) —
// while an overlay of an image, and a size only qemu-img can refuse,
// still go to qemu-img (its failure to start is the error).
func TestBlankDisksWithoutQemuImg(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cat := images.New(filepath.Join(dir, "images"), images.Options{QemuImg: filepath.Join(dir, "no-qemu-img")})
	mk := disks.New(disks.Options{Catalog: cat, DataDir: dir}).DiskImages()
	for size, bytesOf := range map[string]int64{"1000": 1000, "16M": 16 << 20, "64M": 64 << 20, "1G": 1 << 30, "2T": 2 << 40} {
		p := filepath.Join(dir, size+".qcow2")
		if err := mk.Create(ctx, images.Disk{Path: p, Size: size}); err != nil {
			t.Fatalf("blank disk of %s: %v", size, err)
		}
		want, err := qcow2.Image(bytesOf)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(p); !bytes.Equal(got, want) {
			t.Errorf("blank disk of %s: %d bytes, not the image of %d bytes", size, len(got), bytesOf)
		}
	}
	base := filepath.Join(dir, "16M.qcow2")
	for _, d := range []images.Disk{
		{Path: filepath.Join(dir, "overlay.qcow2"), Base: &images.Base{Path: base, Format: "qcow2"}},
		{Path: filepath.Join(dir, "overlay-sized.qcow2"), Base: &images.Base{Path: base, Format: "qcow2"}, Size: "1G"},
		{Path: filepath.Join(dir, "huge.qcow2"), Size: "5T"},
		{Path: filepath.Join(dir, "bad.qcow2"), Size: "12X"},
	} {
		err := mk.Create(ctx, d)
		if err == nil || !strings.Contains(err.Error(), "no-qemu-img") {
			t.Errorf("%s: %v, want qemu-img's (missing) to have been run", filepath.Base(d.Path), err)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := mk.Create(cancelled, images.Disk{Path: filepath.Join(dir, "late.qcow2"), Size: "1M"}); !errors.Is(err, context.Canceled) {
		t.Errorf("blank disk after the context ended: %v", err)
	}
}

// TestBlankDisksOverRealQemuImg: with the real qemu-img, an overlay of
// a blank disk the part wrote in Go is made by qemu-img, which reads the
// Go-written backing file's size from its header.
func TestBlankDisksOverRealQemuImg(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cat := images.New(filepath.Join(dir, "images"), images.Options{QemuImg: testenv.LookPath(t, "qemu-img")})
	mk := disks.New(disks.Options{Catalog: cat, DataDir: dir}).DiskImages()
	base := filepath.Join(dir, "base.qcow2")
	if err := mk.Create(ctx, images.Disk{Path: base, Size: "24M"}); err != nil {
		t.Fatal(err)
	}
	over := filepath.Join(dir, "over.qcow2")
	if err := mk.Create(ctx, images.Disk{Path: over, Base: &images.Base{Path: base, Format: "qcow2"}}); err != nil {
		t.Fatalf("overlay of the Go-written disk: %v", err)
	}
	b, err := os.ReadFile(over)
	if err != nil || !bytes.Contains(b[:4096], []byte(base)) {
		t.Fatalf("the overlay does not name its backing file %s (%v)", base, err)
	}
	want, _ := qcow2.Image(24 << 20)
	if !bytes.Equal(b[24:32], want[24:32]) {
		t.Errorf("overlay virtual size %x, want the base's %x", b[24:32], want[24:32])
	}
}
