package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
)

// makeImage makes an image file with the real qemu-img in a scratch
// directory and returns its bytes.
func makeImage(t *testing.T, qemuImg string, args ...string) []byte {
	t.Helper()
	p := filepath.Join(t.TempDir(), "src")
	full := append(append([]string{"create", "-q"}, args...), p)
	if strings.Contains(strings.Join(args, " "), "encrypt.format") || slices.Contains(args, "luks") {
		full = append([]string{"create", "-q", "--object", "secret,id=sec0,data=test-only-passphrase"}, append(args, p)...)
	}
	full = append(full, "16M")
	testenv.QemuImg(t, full...) // retries QEMU's LUKS benchmark failure
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func TestImportWithQemuImg(t *testing.T) {
	qemuImg := testenv.LookPath(t, "qemu-img")
	ctx := context.Background()
	dir := t.TempDir()
	d := New(dir, Options{QemuImg: qemuImg})
	qcow := makeImage(t, qemuImg, "-f", "qcow2")

	props := map[string]string{"hw_ephemeral_encryption": "True", "hw_ephemeral_encryption_format": "luks", "os_distro": "debian", "x_custom": "kept"}
	img, err := d.Import(ctx, "deb", props, bytes.NewReader(qcow))
	if err != nil {
		t.Fatal(err)
	}
	if img.Format != "qcow2" || img.VirtualSize != 16<<20 || img.File != "deb.qcow2" || len(img.Checksum) != 64 || img.Encrypted || img.Legacy {
		t.Fatalf("imported = %+v", img)
	}
	got, err := d.Get(ctx, "deb")
	if err != nil || got.Properties["x_custom"] != "kept" || got.Properties["hw_ephemeral_encryption"] != "True" || got.Checksum != img.Checksum {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if base, err := d.Lookup(ctx, "deb"); err != nil || base.Path != filepath.Join(dir, "deb.qcow2") || base.Format != "qcow2" {
		t.Fatalf("Lookup = %+v, %v", base, err)
	}
	// The sidecar is there, and nothing else but the image.
	if names := dirNames(t, dir); !slices.Equal(names, []string{"deb.json", "deb.qcow2"}) {
		t.Fatalf("image directory = %v", names)
	}

	// A raw image, and a legacy file put there by hand.
	raw := make([]byte, 1<<20)
	if _, err := d.Import(ctx, "blank", nil, bytes.NewReader(raw)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "old.qcow2"), qcow, 0o644); err != nil {
		t.Fatal(err)
	}
	list, err := d.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range list {
		names = append(names, i.Name+"/"+i.Format)
	}
	if !slices.Equal(names, []string{"blank/raw", "deb/qcow2", "old/qcow2"}) || !list[2].Legacy {
		t.Fatalf("list = %v (%+v)", names, list)
	}

	// Refusals leave nothing behind.
	before := dirNames(t, dir)
	for _, tc := range []struct {
		name   string
		img    string
		props  map[string]string
		data   []byte
		status error  // store.ErrConflict, or nil for a field error
		field  string // the field error's field
	}{
		{"taken name", "deb", nil, qcow, store.ErrConflict, ""},
		{"a legacy file's name", "old", nil, qcow, store.ErrConflict, ""},
		{"bad boolean", "x1", map[string]string{"hw_ephemeral_encryption": "perhaps"}, qcow, nil, "properties[hw_ephemeral_encryption]"},
		{"bad name", "../x", nil, qcow, nil, "name"},
		{"key id on a plain file", "x2", map[string]string{"os_encrypt_key_id": "0a81f5b2-8403-7b23-c8d6-21ccc2f80d6f"}, qcow, nil, "properties[os_encrypt_key_id]"},
		{"encrypted file without a key id", "x3", nil, makeImage(t, qemuImg, "-f", "qcow2", "-o", "encrypt.format=luks,encrypt.key-secret=sec0,encrypt.iter-time=100"), nil, "properties[os_encrypt_key_id]"},
		{"backing file", "x4", nil, makeImage(t, qemuImg, "-f", "qcow2", "-b", filepath.Join(dir, "deb.qcow2"), "-F", "qcow2"), nil, "file"},
		{"vmdk", "x5", nil, makeImage(t, qemuImg, "-f", "vmdk"), nil, "file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.Import(ctx, tc.img, tc.props, bytes.NewReader(tc.data))
			if tc.status != nil {
				if !errors.Is(err, tc.status) {
					t.Fatalf("Import = %v, want %v", err, tc.status)
				}
			} else {
				var se *model.SpecError
				if !errors.As(err, &se) || se.Errors[0].Field != tc.field {
					t.Fatalf("Import = %v, want a field error on %s", err, tc.field)
				}
			}
			if after := dirNames(t, dir); !slices.Equal(after, before) {
				t.Fatalf("image directory changed: %v -> %v", before, after)
			}
		})
	}

	// An encrypted image with its key imports.
	luks := makeImage(t, qemuImg, "-f", "qcow2", "-o", "encrypt.format=luks,encrypt.key-secret=sec0,encrypt.iter-time=100")
	enc, err := d.Import(ctx, "enc", map[string]string{"os_encrypt_key_id": "0a81f5b2-8403-7b23-c8d6-21ccc2f80d6f", "os_encrypt_format": "luks"}, bytes.NewReader(luks))
	if err != nil || !enc.Encrypted {
		t.Fatalf("encrypted import = %+v, %v", enc, err)
	}

	// Delete: refused in use, naming the instances; then gone.
	err = d.Delete(ctx, "deb", func(context.Context) ([]string, error) { return []string{"vm-1"}, nil })
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "vm-1") {
		t.Fatalf("delete in use = %v", err)
	}
	if err := d.Delete(ctx, "deb", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Get(ctx, "deb"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if err := d.Delete(ctx, "old", nil); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{"blank.json", "blank.raw", "enc.json", "enc.qcow2"}) {
		t.Fatalf("after deletes: %v", names)
	}
}

func TestTemplatesAndResize(t *testing.T) {
	qemuImg := testenv.LookPath(t, "qemu-img")
	testenv.LookPath(t, "mkfs.ext4")
	testenv.LookPath(t, "mkswap")
	blkid := testenv.LookPath(t, "blkid")
	ctx := context.Background()
	d := New(t.TempDir(), Options{QemuImg: qemuImg})
	tpl := d.NewTemplates(t.TempDir())
	eph, err := tpl.Template(ctx, TemplateEphemeral, 1)
	if err != nil {
		t.Fatal(err)
	}
	swap, err := tpl.Template(ctx, TemplateSwap, 64)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, want string
	}{
		{eph.Path, `TYPE="ext4"`}, {eph.Path, `LABEL="ephemeral0"`}, {swap.Path, `TYPE="swap"`},
	} {
		out, err := exec.Command(blkid, "-p", tc.path).CombinedOutput()
		if err != nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("blkid %s = %s, %v; want %s", tc.path, out, err, tc.want)
		}
	}
	if again, err := tpl.Template(ctx, TemplateEphemeral, 1); err != nil || again != eph {
		t.Fatalf("cached template = %+v, %v", again, err)
	}
	disk := filepath.Join(t.TempDir(), "disk.eph0")
	if err := d.Create(ctx, Disk{Path: disk, Base: &eph}); err != nil {
		t.Fatal(err)
	}
	if n, err := d.VirtualSize(ctx, disk); err != nil || n != 1<<30 {
		t.Fatalf("overlay size = %d, %v", n, err)
	}
	if err := d.Resize(ctx, disk, 2<<30); err != nil {
		t.Fatal(err)
	}
	if n, _ := d.VirtualSize(ctx, disk); n != 2<<30 {
		t.Fatalf("grown size = %d", n)
	}
	if err := d.Resize(ctx, disk, 1<<30); err == nil || !strings.Contains(err.Error(), "never shrunk") {
		t.Fatalf("shrink = %v", err)
	}
}

// BenchmarkEphemeralTemplate measures what the first instance of a flavor
// pays for its ephemeral disk: a sparse raw file formatted ext4 by the
// real mkfs.ext4 (later instances reuse the template and pay one
// qemu-img create). -bench EphemeralTemplate -benchtime 3x.
func BenchmarkEphemeralTemplate(b *testing.B) {
	testenv.LookPath(b, "mkfs.ext4")
	qemuImg := testenv.LookPath(b, "qemu-img")
	for _, gib := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("%dGiB", gib), func(b *testing.B) {
			for b.Loop() {
				d := New(b.TempDir(), Options{QemuImg: qemuImg})
				if _, err := d.NewTemplates(b.TempDir()).Template(context.Background(), TemplateEphemeral, gib); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// An import removes the temporary file a crashed import of the same name
// left, and not another name's.
func TestImportRemovesStale(t *testing.T) {
	qemuImg := testenv.LookPath(t, "qemu-img")
	dir := t.TempDir()
	d := New(dir, Options{QemuImg: qemuImg})
	for _, n := range []string{".import-deb-123", ".import-deb-2-456"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Import(context.Background(), "deb", nil, bytes.NewReader(make([]byte, 1<<16))); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{".import-deb-2-456", "deb.json", "deb.raw"}) {
		t.Fatalf("image directory = %v", names)
	}
}

// Delete waits while an apply uses the image, and then sees its instance.
func TestDeleteWaitsForUse(t *testing.T) {
	qemuImg := testenv.LookPath(t, "qemu-img")
	d := New(t.TempDir(), Options{QemuImg: qemuImg})
	if _, err := d.Import(context.Background(), "deb", nil, bytes.NewReader(make([]byte, 1<<16))); err != nil {
		t.Fatal(err)
	}
	release := d.Use("deb")
	var released atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- d.Delete(context.Background(), "deb", func(context.Context) ([]string, error) {
			if !released.Load() {
				return nil, errors.New("the in-use check ran while an apply held the image")
			}
			return []string{"vm-1"}, nil // the apply's committed record
		})
	}()
	released.Store(true)
	release()
	if err := <-done; !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "vm-1") {
		t.Fatalf("delete = %v, want a conflict naming vm-1", err)
	}
}
