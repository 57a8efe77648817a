package virt

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/testenv"
)

// firmwareFiles writes the firmware entries of a rendered instance at
// revision rev into dir and returns them as libvirt entries.
func firmwareFiles(t *testing.T, dir string, in *model.Instance, rev int64) ([]FirmwareFile, map[string][]byte) {
	t.Helper()
	tr, err := metadata.Render(in, metadata.Options{Revision: rev})
	if err != nil {
		t.Fatal(err)
	}
	es, err := metadata.FirmwareEntries(tr)
	if err != nil {
		t.Fatal(err)
	}
	var out []FirmwareFile
	data := map[string][]byte{}
	for _, e := range es {
		p := FirmwareFileName(dir, rev, e.Name)
		if err := os.WriteFile(p, e.Data, 0o600); err != nil {
			t.Fatal(err)
		}
		out = append(out, FirmwareFile{Name: e.Name, File: p})
		data[e.Name] = e.Data
	}
	return out, data
}

func TestSetFirmware(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "instances"), 0o755)
	in := &model.Instance{Name: "fw-unit", UUID: "8c3f6a0e-1b2c-4d5e-8f90-123456789abc",
		Disks: []model.Disk{{Name: "vdb", Bus: "virtio", Address: "0000:00:07.0", Tag: "db"}}}
	host := Host{DataDir: dir, Disks: map[string]DiskSource{"vdb": {Path: "instances/vdb.qcow2"}}}
	doc, err := BuildDomain(in, host, Options{})
	if err != nil {
		t.Fatal(err)
	}
	files3, _ := firmwareFiles(t, filepath.Join(dir, "instances"), in, 3)
	with, err := SetFirmware(doc, dir, files3)
	if err != nil {
		t.Fatal(err)
	}
	got, err := FirmwareFiles(with)
	if err != nil || len(got) != 3 || FirmwareRevision(got) != 3 {
		t.Fatalf("after SetFirmware: %+v, %v\n%s", got, err, with)
	}
	if _, err := ParseDevices(with); err != nil {
		t.Fatalf("ParseDevices of the result: %v", err)
	}
	files4, _ := firmwareFiles(t, filepath.Join(dir, "instances"), in, 4)
	again, err := SetFirmware(with, dir, files4)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := FirmwareFiles(again); len(got) != 3 || FirmwareRevision(got) != 4 {
		t.Fatalf("replaced: %+v\n%s", got, again)
	}
	// Off again: the document is what it was, byte for byte.
	off, err := SetFirmware(again, dir, nil)
	if err != nil || !bytes.Equal(off, doc) {
		t.Fatalf("removed: %v\n%s\nwant\n%s", err, off, doc)
	}

	long := FirmwareFile{Name: metadata.FirmwarePrefix + strings.Repeat("x", 36), File: files3[0].File}
	for _, tc := range []struct {
		name  string
		files []FirmwareFile
		want  string
	}{
		{"name over QEMU's limit", []FirmwareFile{long}, "56 bytes, more than QEMU's limit of 55"},
		{"not under opt", []FirmwareFile{{Name: "etc/vmeta", File: files3[0].File}}, `must start with "opt/"`},
		{"twice", []FirmwareFile{files3[0], files3[0]}, "appears twice"},
		{"file outside the data directory", []FirmwareFile{{Name: metadata.FirmwareUUID, File: "/etc/passwd"}}, "firmware[0].file"},
		{"file missing", []FirmwareFile{{Name: metadata.FirmwareUUID, File: ""}}, "firmware[0].file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := SetFirmware(with, dir, tc.files)
			if err == nil || !strings.Contains(err.Error(), tc.want) || out != nil {
				t.Fatalf("SetFirmware = %v (output %d bytes), want an error containing %q", err, len(out), tc.want)
			}
			t.Log(err)
		})
	}
}

// reFwCfg reads libvirt's own formatting of the fw_cfg entries.
var (
	reFwCfgBlock = regexp.MustCompile(`(?s)<sysinfo type='fwcfg'>(.*?)</sysinfo>`)
	reFwCfgEntry = regexp.MustCompile(`<entry name='([^']+)' file='([^']+)'/>`)
)

func dumpFirmware(t *testing.T, uri, name string, live bool) map[string]string {
	t.Helper()
	args := []string{"dumpxml", name}
	if !live {
		args = append(args, "--inactive")
	}
	out := map[string]string{}
	for _, b := range reFwCfgBlock.FindAllStringSubmatch(virsh(t, uri, args...), -1) {
		for _, e := range reFwCfgEntry.FindAllStringSubmatch(b[1], -1) {
			out[e[1]] = e[2]
		}
	}
	return out
}

// TestFirmwareAgainstLibvirt defines a domain, adds the fw_cfg entries to
// its persistent definition the way hostctl does (SetFirmware on the XML
// libvirt formatted), starts it under TCG and checks what libvirt and QEMU
// were given; then a newer revision redefined while it runs is the next
// boot's, and the running QEMU keeps what it read.
func TestFirmwareAgainstLibvirt(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	ctx := testCtx(t, 2*time.Minute)
	c := connect(t, uri, ConnOptions{})
	if v, err := c.Version(ctx); err != nil || !VersionAtLeast(v, MinFirmwareLibVersion) {
		testenv.Require(t, "libvirt >= "+MinFirmwareLibVersion, "libvirtd is "+v)
	}
	name := testenv.UniqueDomainName(t)
	d := newTestDataDir(t, "vda")
	in := &model.Instance{Name: name, UUID: randomUUID(t), Disks: []model.Disk{{Name: "vda", Bus: "virtio", Serial: "root-0001", Tag: "root"}}}
	doc, err := BuildDomain(in, d.host, Options{MemoryMiB: 128})
	if err != nil {
		t.Fatal(err)
	}
	testenv.CleanupDomain(t, uri, name)
	if _, err := c.Define(ctx, doc); err != nil {
		t.Fatalf("Define: %v", err)
	}
	inactive, devs := domainDevices(t, ctx, c, name, false)
	if err := devs.Apply(in); err != nil {
		t.Fatal(err)
	}
	instDir := filepath.Join(d.dir, "instances")
	files, data := firmwareFiles(t, instDir, in, 1)
	next, err := SetFirmware(inactive, d.dir, files)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Define(ctx, next); err != nil {
		t.Fatalf("Define with fw_cfg entries: %v\n%s", err, next)
	}
	seen := dumpFirmware(t, uri, name, false)
	if len(seen) != 3 {
		t.Fatalf("virsh dumpxml --inactive shows fw_cfg entries %v, want 3", seen)
	}
	for _, f := range files {
		if seen[f.Name] != f.File {
			t.Errorf("entry %s: libvirt has file %q, want %q", f.Name, seen[f.Name], f.File)
		}
		b, err := os.ReadFile(seen[f.Name])
		if err != nil || !bytes.Equal(b, data[f.Name]) {
			t.Errorf("entry %s: file %s holds %q (%v), want %q", f.Name, seen[f.Name], b, err, data[f.Name])
		}
		t.Logf("entry %s: %d bytes (%s)", f.Name, len(data[f.Name]), filepath.Base(f.File))
	}

	if err := c.Start(ctx, name); err != nil {
		t.Fatalf("Start: %v", err)
	}
	argv := qemuCommandLine(t, name)
	for _, f := range files {
		if want := "name=" + f.Name + ",file=" + f.File; !strings.Contains(argv, want) {
			t.Errorf("QEMU's command line lacks -fw_cfg %s:\n%s", want, argv)
		}
	}

	// A publish while it runs: revision 2 is the persistent definition's,
	// the running domain keeps revision 1.
	inactive, err = c.XML(ctx, name, false)
	if err != nil {
		t.Fatal(err)
	}
	files2, _ := firmwareFiles(t, instDir, in, 2)
	next, err = SetFirmware(inactive, d.dir, files2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Define(ctx, next); err != nil {
		t.Fatalf("redefine while running: %v", err)
	}
	liveXML, err := c.XML(ctx, name, true)
	if err != nil {
		t.Fatal(err)
	}
	persistent, err := c.XML(ctx, name, false)
	if err != nil {
		t.Fatal(err)
	}
	lf, _ := FirmwareFiles(liveXML)
	pf, _ := FirmwareFiles(persistent)
	if FirmwareRevision(lf) != 1 || FirmwareRevision(pf) != 2 {
		t.Errorf("running domain carries revision %d (want 1), next boot %d (want 2)", FirmwareRevision(lf), FirmwareRevision(pf))
	}
	if got := dumpFirmware(t, uri, name, true); got[metadata.FirmwareRevision] != files[2].File {
		t.Errorf("live dumpxml: revision entry %q, want %q", got[metadata.FirmwareRevision], files[2].File)
	}
	if err := c.Destroy(ctx, name); err != nil {
		t.Fatal(err)
	}
	// Off: the next boot is revision 2.
	if got := dumpFirmware(t, uri, name, false); got[metadata.FirmwareRevision] != files2[2].File {
		t.Errorf("after destroy: revision entry %q, want %q", got[metadata.FirmwareRevision], files2[2].File)
	}
}

func TestVersionAtLeast(t *testing.T) {
	for _, tc := range []struct {
		v, min string
		want   bool
	}{
		{"9.0.0", "6.5.0", true}, {"6.5.0", "6.5.0", true}, {"6.4.9", "6.5.0", false}, {"10.0.0", "6.5.0", true},
		{"6.10.0", "6.5.0", true}, {"5.99.99", "6.5.0", false}, {"9.0", "6.5.0", false}, {"x.y.z", "6.5.0", false},
	} {
		if got := VersionAtLeast(tc.v, tc.min); got != tc.want {
			t.Errorf("VersionAtLeast(%q, %q) = %t", tc.v, tc.min, got)
		}
	}
}

// TestFirmwareNameLimitAgainstQEMU: why SetFirmware checks names itself.
// libvirt defines a domain whose fw_cfg name is over QEMU's limit without
// a word; QEMU refuses it only when the domain starts. SetFirmware refuses
// it before anything is defined.
func TestFirmwareNameLimitAgainstQEMU(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	ctx := testCtx(t, 2*time.Minute)
	c := connect(t, uri, ConnOptions{})
	name := testenv.UniqueDomainName(t)
	d := newTestDataDir(t)
	in := &model.Instance{Name: name, UUID: randomUUID(t)}
	doc, err := BuildDomain(in, d.host, Options{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	long := metadata.FirmwarePrefix + strings.Repeat("x", metadata.MaxFirmwareName+1-len(metadata.FirmwarePrefix))
	file := filepath.Join(d.dir, "instances", "long")
	os.WriteFile(file, []byte("x\n"), 0o600)
	if _, err := SetFirmware(doc, d.dir, []FirmwareFile{{Name: long, File: file}}); err == nil || !strings.Contains(err.Error(), "more than QEMU's limit of 55") {
		t.Fatalf("SetFirmware with a %d-byte name: %v", len(long), err)
	}
	// The same entry written past the check.
	ok, err := SetFirmware(doc, d.dir, []FirmwareFile{{Name: metadata.FirmwareUUID, File: file}})
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(ok, []byte(metadata.FirmwareUUID), []byte(long), 1)
	testenv.CleanupDomain(t, uri, name)
	if _, err := c.Define(ctx, bad); err != nil {
		t.Logf("libvirt refuses the define: %v", err)
		return
	}
	err = c.Start(ctx, name)
	if err == nil {
		t.Fatalf("QEMU started with a %d-byte fw_cfg name", len(long))
	}
	if !strings.Contains(err.Error(), "name too long") {
		t.Errorf("start: %v, want QEMU's \"name too long\"", err)
	}
	t.Logf("libvirt defined it; QEMU refused it at start: %v", err)
}
