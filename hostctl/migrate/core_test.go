package migrate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/internal/errkind"
)

// dirCore is a Core with only a data directory and a hypervisor without
// domains (the destination's checks of what arrives read nothing else).
type dirCore struct {
	Core
	dir string
}

func (c dirCore) DataDir() string                { return c.dir }
func (c dirCore) Capabilities() (bool, bool)     { return true, true }
func (c dirCore) InstanceDir(name string) string { return filepath.Join(c.dir, "instances", name) }
func (c dirCore) CurrentDomain(context.Context, string, string) (*controller.Domain, error) {
	return nil, nil
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestDestinationChecksWhatArrives: the destination takes only the
// move's disks (into its staging directory) and blank-disk templates it
// lacks, each checked by size and SHA-256; anything else is refused and
// nothing is written. Its preflight names the images it lacks and asks
// for the templates.
func TestDestinationChecksWhatArrives(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	h := &Host{Name: "b", Core: dirCore{dir: dir}}
	rec := Record{Instance: "vm", UUID: uuid, Source: "a", Dest: "b", State: Migrating, Secrets: []string{"s1"},
		Disks: []DiskFile{{Name: "disk", Backing: "instances/_base/ephemeral_1_0706d66"}, {Name: "disk-vdb.qcow2", Backing: "images/deb.qcow2"}}}
	data := bytes.Repeat([]byte("ciphertext"), 100)
	cases := []struct {
		name string
		f    DiskFile
		body []byte
		kind errkind.Kind
		file string // written there ("" none)
	}{
		{"a disk of the move", DiskFile{Name: "disk", Size: int64(len(data)), SHA256: sum(data)}, data, 0, "migrations/" + uuid + "/disk"},
		{"a template", DiskFile{Name: "base:instances/_base/ephemeral_1_0706d66", Size: 5, SHA256: sum([]byte("blank"))}, []byte("blank"), 0, "instances/_base/ephemeral_1_0706d66"},
		{"another checksum", DiskFile{Name: "disk-vdb.qcow2", Size: int64(len(data)), SHA256: sum([]byte("x"))}, data, errkind.Invalid, ""},
		{"fewer bytes", DiskFile{Name: "disk-vdb.qcow2", Size: int64(len(data)) + 1, SHA256: sum(data)}, data, errkind.Invalid, ""},
		{"not a disk of the move", DiskFile{Name: "disk.swap", Size: 4, SHA256: sum([]byte("swap"))}, []byte("swap"), errkind.Invalid, ""},
		{"a path", DiskFile{Name: "../../etc/passwd", Size: 4, SHA256: sum([]byte("root"))}, []byte("root"), errkind.Invalid, ""},
		{"an image as a template", DiskFile{Name: "base:images/deb.qcow2", Size: 4, SHA256: sum([]byte("evil"))}, []byte("evil"), errkind.Invalid, ""},
		{"a template outside", DiskFile{Name: "base:instances/_base/../../../x", Size: 4, SHA256: sum([]byte("evil"))}, []byte("evil"), errkind.Invalid, ""},
	}
	for _, c := range cases {
		err := h.ReceiveDisk(ctx, rec, c.f, bytes.NewReader(c.body))
		switch {
		case c.kind == 0 && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.kind != 0 && errkind.Of(err) != c.kind:
			t.Errorf("%s: %v, want %v", c.name, err, c.kind)
		}
		if c.file != "" {
			if b, err := os.ReadFile(filepath.Join(dir, c.file)); err != nil || !bytes.Equal(b, c.body) {
				t.Errorf("%s: %s holds %q, %v", c.name, c.file, b, err)
			}
		}
	}
	var stray []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			stray = append(stray, strings.TrimPrefix(p, dir+"/"))
		}
		return nil
	})
	if len(stray) != 2 {
		t.Errorf("files written: %v, want the disk and the template only", stray)
	}
	if err := h.ReceiveSecret(ctx, rec, "s9", []byte("p")); !errors.Is(err, ErrForbidden) {
		t.Errorf("a secret not of the move: %v, want ErrForbidden", err)
	}

	// Preflight: encrypted disks need a key manager; the image is missing
	// (named); the template is there now.
	if _, err := h.Preflight(ctx, rec); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "no key manager") {
		t.Errorf("preflight of encrypted disks without a key manager: %v", err)
	}
	rec.Secrets = nil
	if _, err := h.Preflight(ctx, rec); errkind.Of(err) != errkind.NotFound || !strings.Contains(err.Error(), "images/deb.qcow2") {
		t.Errorf("preflight without the image: %v, want not found naming images/deb.qcow2", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "images", "deb.qcow2"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "instances", "_base", "ephemeral_1_0706d66")); err != nil {
		t.Fatal(err)
	}
	need, err := h.Preflight(ctx, rec)
	if err != nil || len(need) != 1 || need[0] != "instances/_base/ephemeral_1_0706d66" {
		t.Errorf("preflight: %v, %v; want the template asked for", need, err)
	}
}
