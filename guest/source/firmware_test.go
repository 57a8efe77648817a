package source_test

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/guest/source"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
)

const fwUUID = "8c3f6a0e-1b2c-4d5e-8f90-123456789abc"

// fwInstance is an instance with a tagged disk, whose tag says which
// revision it was rendered at.
func fwTree(t *testing.T, rev int64, tag string) *metadata.Tree {
	t.Helper()
	in := &model.Instance{Name: "fw", UUID: fwUUID, UserData: "#cloud-config\npassword: hunter2\n",
		Disks: []model.Disk{{Name: "vdb", Bus: "virtio", Address: "0000:00:07.0", Serial: "vol-b", Tag: tag}}}
	tr, err := metadata.Render(in, metadata.Options{Revision: rev})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// writeFirmware lays out what qemu_fw_cfg shows in sysfs for entries:
// by_name/<name>/{raw,size}.
func writeFirmware(t *testing.T, dir string, entries []metadata.FirmwareEntry) {
	t.Helper()
	for _, e := range entries {
		p := filepath.Join(dir, "by_name", filepath.FromSlash(e.Name))
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(p, "raw"), e.Data, 0o644)
		os.WriteFile(filepath.Join(p, "size"), []byte(strconv.Itoa(len(e.Data))+"\n"), 0o644)
	}
}

func entries(t *testing.T, tr *metadata.Tree) []metadata.FirmwareEntry {
	t.Helper()
	es, err := metadata.FirmwareEntries(tr)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func noLoad(context.Context) error { return errors.New("no module here") }

// TestFirmware reads what the host writes: the same devices, uuid and
// revision as the latest meta_data.json of the same tree.
func TestFirmware(t *testing.T) {
	dir := t.TempDir()
	tr := fwTree(t, 7, "oracledb")
	writeFirmware(t, dir, entries(t, tr))
	fw := &source.Firmware{Dir: dir, Load: noLoad}
	doc, err := fw.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	md, _ := tr.Get(source.MetaDataPath)
	fromDrive, err := source.Parse(md)
	if err != nil {
		t.Fatal(err)
	}
	if doc.Source != source.KindFirmware || doc.Revision != 7 || doc.UUID != fwUUID || doc.Digest != fromDrive.Digest ||
		len(doc.Devices) != 1 || doc.Devices[0].Tags[0] != "oracledb" {
		t.Fatalf("firmware document %+v; meta_data.json's digest %s", doc, fromDrive.Digest)
	}
	if fromDrive.Revision != 7 {
		t.Errorf("meta_data.json revision %d, want 7", fromDrive.Revision)
	}
}

// TestFirmwareBadInput: every broken entry is an error wrapping ErrInvalid
// that names the entry; no device, or no vmeta entries, is ErrNoFirmware.
func TestFirmwareBadInput(t *testing.T) {
	good := entries(t, fwTree(t, 7, "oracledb"))
	edit := func(name string, f func([]byte) []byte) []metadata.FirmwareEntry {
		out := make([]metadata.FirmwareEntry, 0, len(good))
		for _, e := range good {
			if e.Name == name {
				if f == nil {
					continue
				}
				e.Data = f(bytes.Clone(e.Data))
			}
			out = append(out, e)
		}
		return out
	}
	cut := func(n int) func([]byte) []byte { return func(b []byte) []byte { return b[:len(b)-n] } }
	for _, tc := range []struct {
		name    string
		entries []metadata.FirmwareEntry
		size    string // overrides the devices entry's size file
		want    string
		noFw    bool
	}{
		{name: "devices truncated", entries: edit(metadata.FirmwareDevices, cut(1)), want: "truncated"},
		{name: "devices cut in the middle", entries: edit(metadata.FirmwareDevices, cut(10)), want: "truncated"},
		{name: "devices shorter than its size", entries: good, size: "100000", want: "read"},
		{name: "devices not JSON", entries: edit(metadata.FirmwareDevices, func([]byte) []byte { return []byte("{oops\n") }), want: "not a JSON object"},
		{name: "devices refused by the schema", entries: edit(metadata.FirmwareDevices, func([]byte) []byte {
			return []byte(`{"devices":[{"type":"disk","bus":"pci","address":"not-pci"}]}` + "\n")
		}), want: "/devices/0"},
		{name: "revision missing", entries: edit(metadata.FirmwareRevision, nil), want: metadata.FirmwareRevision},
		{name: "revision truncated", entries: edit(metadata.FirmwareRevision, cut(1)), want: "truncated"},
		{name: "revision garbage", entries: edit(metadata.FirmwareRevision, func([]byte) []byte { return []byte("seven\n") }), want: "not a positive"},
		{name: "uuid missing", entries: edit(metadata.FirmwareUUID, nil), want: metadata.FirmwareUUID},
		{name: "uuid not a uuid", entries: edit(metadata.FirmwareUUID, func([]byte) []byte { return []byte("web-1\n") }), want: "not a uuid"},
		{name: "devices missing", entries: edit(metadata.FirmwareDevices, nil), want: metadata.FirmwareDevices},
		{name: "no vmeta entries", entries: nil, want: "no opt/io.github.vmeta entries", noFw: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, "by_name", "etc"), 0o755)
			writeFirmware(t, dir, tc.entries)
			if tc.size != "" {
				os.WriteFile(filepath.Join(dir, "by_name", metadata.FirmwareDevices, "size"), []byte(tc.size), 0o644)
			}
			_, err := (&source.Firmware{Dir: dir, Load: noLoad}).Fetch(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Fetch = %v, want an error containing %q", err, tc.want)
			}
			if tc.noFw != errors.Is(err, source.ErrNoFirmware) || !tc.noFw && !errors.Is(err, source.ErrInvalid) {
				t.Fatalf("Fetch = %v: ErrNoFirmware %t, ErrInvalid %t", err, errors.Is(err, source.ErrNoFirmware), errors.Is(err, source.ErrInvalid))
			}
			t.Log(err)
		})
	}
	t.Run("no fw_cfg device", func(t *testing.T) {
		loads := 0
		fw := &source.Firmware{Dir: filepath.Join(t.TempDir(), "absent"), Load: func(context.Context) error { loads++; return nil }}
		for range 2 {
			if _, err := fw.Fetch(context.Background()); !errors.Is(err, source.ErrNoFirmware) || !strings.Contains(err.Error(), "not a QEMU guest") {
				t.Fatalf("Fetch = %v", err)
			}
		}
		if loads != 1 {
			t.Errorf("module loaded %d times, want once", loads)
		}
	})
}

// TestAutoNewest: the newest revision wins; equal revisions prefer the
// firmware; a broken firmware falls back to the drive and then the
// service, and says so.
func TestAutoNewest(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fwDir := filepath.Join(dir, "fw")
	drive := filepath.Join(dir, "drive.iso")
	build := func(tr *metadata.Tree) {
		if err := configdrive.Build(drive, tr.ConfigDriveFiles(), configdrive.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	m := &metadataServer{}
	srv := httptest.NewServer(m)
	defer srv.Close()
	setHTTP := func(tr *metadata.Tree) { b, _ := tr.Get(source.MetaDataPath); m.doc = string(b) }
	a := &source.Auto{
		Firmware: &source.Firmware{Dir: fwDir, Load: noLoad},
		Drive:    &source.ConfigDrive{Path: drive},
		HTTP:     &source.HTTP{URLs: []string{srv.URL}, Attempts: 1},
	}
	used := func(doc *source.Document) string {
		for _, r := range doc.Sources {
			if r.Used {
				return r.Source
			}
		}
		return ""
	}

	// Boot: firmware and drive carry revision 3.
	writeFirmware(t, fwDir, entries(t, fwTree(t, 3, "boot")))
	build(fwTree(t, 3, "boot"))
	setHTTP(fwTree(t, 3, "boot"))
	doc, err := a.Fetch(ctx)
	if err != nil || doc.Source != source.KindFirmware || doc.Revision != 3 || used(doc) != source.KindFirmware || len(doc.Sources) != 2 {
		t.Fatalf("equal revisions: %+v, %v (want the firmware; the service not asked while there is a drive)", doc, err)
	}

	// A publish while the guest runs: the drive's medium has revision 4.
	build(fwTree(t, 4, "retagged"))
	doc, err = a.Fetch(ctx)
	if err != nil || doc.Source != source.KindDrive || doc.Revision != 4 || doc.Devices[0].Tags[0] != "retagged" {
		t.Fatalf("newer drive: %+v, %v", doc, err)
	}

	// A corrupt firmware entry: reported, the drive is used.
	os.WriteFile(filepath.Join(fwDir, "by_name", metadata.FirmwareDevices, "raw"), []byte(`{"devices":[`), 0o644)
	doc, err = a.Fetch(ctx)
	if err != nil || doc.Source != source.KindDrive || len(doc.Problems()) != 1 || !strings.Contains(doc.Problems()[0], "firmware not used") {
		t.Fatalf("corrupt firmware: %+v, %v", doc, err)
	}
	t.Logf("problems: %q", doc.Problems())

	// No drive either: the service.
	empty := filepath.Join(dir, "sys")
	os.MkdirAll(filepath.Join(empty, "class", "block"), 0o755)
	a.Drive = &source.ConfigDrive{SysRoot: empty, DevRoot: empty}
	setHTTP(fwTree(t, 5, "http"))
	doc, err = a.Fetch(ctx)
	if err != nil || doc.Source != source.KindHTTP || doc.Revision != 5 {
		t.Fatalf("no drive, bad firmware: %+v, %v", doc, err)
	}

	// Good firmware, no drive, the service newer (a hot-plug after boot).
	writeFirmware(t, fwDir, entries(t, fwTree(t, 3, "boot")))
	doc, err = a.Fetch(ctx)
	if err != nil || doc.Source != source.KindHTTP || doc.Revision != 5 {
		t.Fatalf("no drive, newer service: %+v, %v", doc, err)
	}
	// ... and the service down: the firmware, one attempt at the service.
	srv.Close()
	doc, err = a.Fetch(ctx)
	if err != nil || doc.Source != source.KindFirmware || len(doc.Problems()) != 0 {
		t.Fatalf("no drive, no service: %+v, %v", doc, err)
	}

	// Nothing usable: an error naming what is wrong.
	os.WriteFile(filepath.Join(fwDir, "by_name", metadata.FirmwareRevision, "raw"), []byte("x\n"), 0o644)
	if _, err := a.Fetch(ctx); err == nil || !strings.Contains(err.Error(), "not a positive") || !strings.Contains(err.Error(), "metadata service") {
		t.Fatalf("nothing usable: %v", err)
	}
}

// FuzzParseFirmware: any devices entry either parses into a document the
// schema accepts, or is refused with ErrInvalid; never a panic.
func FuzzParseFirmware(f *testing.F) {
	in := &model.Instance{Name: "fw", UUID: fwUUID, Disks: []model.Disk{{Name: "vdb", Bus: "virtio", Address: "0000:00:07.0", Tag: "db"}}}
	tr, err := metadata.Render(in, metadata.Options{Revision: 3})
	if err != nil {
		f.Fatal(err)
	}
	es, err := metadata.FirmwareEntries(tr)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(es[0].Data)
	f.Add([]byte(`{"devices":[]}` + "\n"))
	f.Add([]byte(`{"devices":[{"type":"gpu"}]}` + "\n"))
	f.Add([]byte(`{"devices":[`))
	f.Fuzz(func(t *testing.T, b []byte) {
		doc, err := source.ParseFirmware(b, fwUUID, 3)
		if err != nil {
			if !errors.Is(err, source.ErrInvalid) {
				t.Fatalf("error without ErrInvalid: %v", err)
			}
			return
		}
		if doc.Revision != 3 || doc.Source != source.KindFirmware || !bytes.HasSuffix(b, []byte("\n")) {
			t.Fatalf("accepted %q as %+v", b, doc)
		}
	})
}

// BenchmarkFetch reads the same revision from the firmware (a sysfs-like
// directory) and from a config drive image (ISO 9660, read without
// mounting): what each read costs once the schema is compiled.
func BenchmarkFetch(b *testing.B) {
	in := &model.Instance{Name: "fw", UUID: fwUUID, Disks: []model.Disk{
		{Name: "vdb", Bus: "virtio", Address: "0000:00:07.0", Serial: "vol-b", Tag: "db"},
		{Name: "sda", Bus: "scsi", Address: "0:0:1:0", Serial: "vol-a", Tag: "logs"}}}
	tr, err := metadata.Render(in, metadata.Options{Revision: 7})
	if err != nil {
		b.Fatal(err)
	}
	es, err := metadata.FirmwareEntries(tr)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	for _, e := range es {
		p := filepath.Join(dir, "fw", "by_name", filepath.FromSlash(e.Name))
		os.MkdirAll(p, 0o755)
		os.WriteFile(filepath.Join(p, "raw"), e.Data, 0o644)
		os.WriteFile(filepath.Join(p, "size"), []byte(strconv.Itoa(len(e.Data))), 0o644)
	}
	drive := filepath.Join(dir, "drive.iso")
	if err := configdrive.Build(drive, tr.ConfigDriveFiles(), configdrive.Options{}); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		s    source.Source
	}{{"firmware", &source.Firmware{Dir: filepath.Join(dir, "fw"), Load: noLoad}}, {"configdrive", &source.ConfigDrive{Path: drive}}} {
		s := c.s
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Fetch(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestAutoReadsFirmwareAndDriveTogether: Auto reads the config drive
// while the firmware read is still pending (here: loading qemu_fw_cfg),
// so a slow module load and a slow drive do not add up at boot. The
// drive is a FIFO, whose opening by the reader the test sees; the
// firmware's module load waits until the test lets it go.
func TestAutoReadsFirmwareAndDriveTogether(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "drive")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	release := make(chan struct{})
	a := &source.Auto{
		Firmware: &source.Firmware{Dir: filepath.Join(dir, "no-fw-cfg"), Load: func(context.Context) error {
			<-release
			return errors.New("not a QEMU guest")
		}},
		Drive: &source.ConfigDrive{Path: fifo},
	}
	done := make(chan error, 1)
	go func() {
		_, err := a.Fetch(context.Background())
		done <- err
	}()
	opened := make(chan *os.File, 1)
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // returns once the drive is opened for reading
		if err == nil {
			opened <- w
		}
	}()
	select {
	case w := <-opened:
		w.Close()
	case err := <-done:
		t.Fatalf("Fetch returned before reading the drive: %v", err)
	case <-time.After(time.Minute):
		close(release)
		t.Fatal("the drive was not read while the firmware read was pending")
	}
	close(release)
	err := <-done
	if err == nil || !strings.Contains(err.Error(), fifo) {
		t.Errorf("Fetch = %v, want the drive's error (a FIFO is no drive)", err)
	}
}
