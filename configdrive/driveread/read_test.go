package driveread

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"

	"github.com/vmeta/vmeta/configdrive/internal/isowriter"
	"github.com/vmeta/vmeta/internal/metadata"
)

// sampleFiles is a small config drive's content.
var sampleFiles = []metadata.File{
	{Path: "ec2/latest/meta-data.json", Data: []byte(`{"hostname":"web-1"}`)},
	{Path: "openstack/latest/meta_data.json", Data: []byte(`{"uuid":"u","devices":[]}`)},
	{Path: "openstack/latest/user_data", Data: []byte("#cloud-config\n")},
	{Path: "openstack/2018-08-27/meta_data.json", Data: []byte(`{"uuid":"u"}`)},
}

// writeISO writes the ISO 9660 image of files to a temporary file.
func writeISO(t testing.TB, files []metadata.File) string {
	t.Helper()
	im, err := isowriter.New(files, isowriter.Options{VolumeID: "config-2"})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "disk.config")
	if err := os.WriteFile(p, im.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReadISO2048Fallback exercises Read's fallback for block devices with
// 512-byte logical sectors directly on an image file: go-diskfs refuses a
// 512-byte ISO block size (what GetFilesystem passes for such a device),
// readISO2048 over a read-only file backend reads the drive. The end-to-end
// path through a real loop device is configdrive's TestReadLoopDevice
// (needs root).
func TestReadISO2048Fallback(t *testing.T) {
	p := writeISO(t, sampleFiles)
	b, err := file.OpenFromPath(p, true)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st, err := b.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := iso9660.Read(b, st.Size(), 0, 512); err == nil {
		t.Fatal("go-diskfs now accepts 512-byte ISO blocks; the fallback may be obsolete")
	}
	fsys, err := readISO2048(b, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	files, err := readTree(fsys, st.Size(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(sampleFiles) {
		t.Fatalf("read %d files, want %d", len(files), len(sampleFiles))
	}
	for _, f := range sampleFiles {
		if got := string(files[f.Path]); got != string(f.Data) {
			t.Errorf("%s differs", f.Path)
		}
	}
	if l := strings.TrimRight(fsys.Label(), " \x00"); l != "config-2" {
		t.Errorf("label %q", l)
	}
}

// TestReadFile: ReadFile returns exactly the file Read would, and the
// label, for every file of the drive; a missing path, a directory or a
// path through a file is fs.ErrNotExist.
func TestReadFile(t *testing.T) {
	p := writeISO(t, sampleFiles)
	all, label, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range sampleFiles {
		got, l, err := ReadFile(p, f.Path)
		if err != nil || string(got) != string(all[f.Path]) || l != label {
			t.Errorf("ReadFile(%s) = %q, %q, %v; want %q, %q", f.Path, got, l, err, all[f.Path], label)
		}
	}
	for _, name := range []string{"openstack/latest/vendor_data.json", "openstack/latest", "openstack/latest/user_data/x", "nothing/here"} {
		if _, _, err := ReadFile(p, name); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("ReadFile(%s) = %v, want fs.ErrNotExist", name, err)
		}
	}
	for _, name := range []string{"", "openstack//latest", "./openstack/latest/user_data", "openstack/../openstack/latest/user_data"} {
		if _, _, err := ReadFile(p, name); err == nil || errors.Is(err, fs.ErrNotExist) {
			t.Errorf("ReadFile(%q) = %v, want an invalid path", name, err)
		}
	}
}
