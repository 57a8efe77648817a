package images

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/testenv"
)

func TestLookupAndCreate(t *testing.T) {
	qemuImg := testenv.LookPath(t, "qemu-img")
	ctx := context.Background()
	dir := t.TempDir()
	d := New(dir, Options{QemuImg: qemuImg})

	if err := d.Create(ctx, Disk{Path: filepath.Join(dir, "debian.qcow2"), Size: "32M"}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "raw.img"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, format string }{
		{"debian", "debian.qcow2", "qcow2"},
		{"debian.qcow2", "debian.qcow2", "qcow2"},
		{"raw", "raw.img", "raw"},
	} {
		b, err := d.Lookup(ctx, tc.name)
		if err != nil || b.Path != filepath.Join(dir, tc.path) || b.Format != tc.format {
			t.Errorf("Lookup(%q) = %+v, %v; want %s (%s)", tc.name, b, err, tc.path, tc.format)
		}
	}
	for name, says := range map[string]string{
		"nope":            "no such image",
		"../etc/passwd":   "no path",
		".hidden":         "no path",
		`sub\debian`:      "no path",
		"..":              "no path",
		"debian.qcow2/..": "no path",
	} {
		if _, err := d.Lookup(ctx, name); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("Lookup(%q) = %v; want an error saying %q", name, err, says)
		}
	}

	base, err := d.Lookup(ctx, "debian")
	if err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(t.TempDir(), "disk-vda.qcow2")
	if err := d.Create(ctx, Disk{Path: overlay, Base: &base}); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(qemuImg, "info", "--output=json", overlay).Output()
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Format      string `json:"format"`
		BackingFile string `json:"backing-filename"`
		VirtualSize int64  `json:"virtual-size"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatal(err)
	}
	if info.Format != DiskFormat || info.BackingFile != base.Path || info.VirtualSize != 32<<20 {
		t.Errorf("overlay: %+v", info)
	}
}

func TestCreateFails(t *testing.T) {
	qemuImg := testenv.LookPath(t, "qemu-img")
	d := New(t.TempDir(), Options{QemuImg: qemuImg})
	err := d.Create(context.Background(), Disk{Path: filepath.Join(t.TempDir(), "x.qcow2"), Size: "lots"})
	if err == nil || !strings.Contains(err.Error(), "qemu-img create") {
		t.Errorf("bad size: %v", err)
	}
	d = New(t.TempDir(), Options{QemuImg: filepath.Join(t.TempDir(), "no-qemu-img")})
	if err := d.Create(context.Background(), Disk{Path: filepath.Join(t.TempDir(), "x.qcow2"), Size: "1M"}); err == nil {
		t.Error("missing qemu-img: no error")
	}
}
