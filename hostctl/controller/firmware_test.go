package controller

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/testenv"
)

// firmwareFilesOf lists the instance directory's firmware entry files.
func firmwareFilesOf(t *testing.T, e *env, name string) []string {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(e.dir, "instances", name))
	var out []string
	for _, en := range ents {
		if firmwareFileRE.MatchString(en.Name()) {
			out = append(out, en.Name())
		}
	}
	return out
}

// checkFirmware: the persistent definition names the entries of revision
// rev, whose files hold exactly what the stored tree's entries are, with
// the config drive's permissions; no other revision's files are left.
func checkFirmware(t *testing.T, e *env, hv Hypervisor, name string, rev int64) {
	t.Helper()
	ctx := context.Background()
	doc, err := hv.XML(ctx, name, false)
	if err != nil {
		t.Fatal(err)
	}
	files, err := virt.FirmwareFiles(doc)
	if err != nil {
		t.Fatal(err)
	}
	if got := virt.FirmwareRevision(files); got != rev || len(files) != 3 {
		t.Fatalf("persistent definition: entries %+v (revision %d), want 3 of revision %d", files, got, rev)
	}
	rec, err := e.st.Instance(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	sd, err := e.st.Document(ctx, rec.UUID)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := metadata.DecodeTree(sd.Tree)
	if err != nil {
		t.Fatal(err)
	}
	if got := metadata.TreeRevision(tree); got != rev {
		t.Errorf("the published tree carries revision %d, want %d", got, rev)
	}
	want, err := metadata.FirmwareEntries(tree)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range files {
		b, err := os.ReadFile(f.File)
		if err != nil || f.Name != want[i].Name || !bytes.Equal(b, want[i].Data) {
			t.Errorf("entry %s (%s): %q, %v; want %s %q", f.Name, f.File, b, err, want[i].Name, want[i].Data)
		}
		fi, err := os.Stat(f.File)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("entry file %s: mode %v, %v; want 0600 like the config drive", f.File, fi.Mode(), err)
		}
	}
	if got := firmwareFilesOf(t, e, name); len(got) != 3 {
		t.Errorf("firmware files %v, want only revision %d's", got, rev)
	}
}

// TestFirmwareEntries (fake libvirt): every publish writes the entries of
// its revision and names them in the persistent definition; off, a
// publish takes them out.
func TestFirmwareEntries(t *testing.T) {
	e := newEnv(t)
	withFirmware(e, true)
	inst := e.mustApply(hvSpec)
	checkFirmware(t, e, e.hv, "app-1", inst.Revision)
	inst = e.mustApply(strings.Replace(hvSpec, "tag: data", "tag: data2", 1))
	if inst.Revision != 2 {
		t.Fatalf("revision %d", inst.Revision)
	}
	checkFirmware(t, e, e.hv, "app-1", 2)
	got, err := e.c.Get(context.Background(), "app-1")
	if err != nil {
		t.Fatal(err)
	}
	ts := transportMap(got)
	if ts[types.TransportHTTP].Revision != 2 || ts[types.TransportDrive].Revision != 2 || ts[types.TransportFirmware].Revision != 2 {
		t.Errorf("transports of a stopped instance: %+v", ts)
	}

	withFirmware(e, false)
	e.mustApply(hvSpec)
	doc, _ := e.hv.XML(context.Background(), "app-1", false)
	if files, _ := virt.FirmwareFiles(doc); len(files) != 0 || len(firmwareFilesOf(t, e, "app-1")) != 0 {
		t.Errorf("firmware off: entries %v, files %v", files, firmwareFilesOf(t, e, "app-1"))
	}
	got, _ = e.c.Get(context.Background(), "app-1")
	if fw := transportMap(got)[types.TransportFirmware]; fw.Revision != 0 || !strings.Contains(fw.Note, "off") {
		t.Errorf("firmware off: transport %+v", fw)
	}
}

func transportMap(inst *Instance) map[string]part.Transport {
	m := map[string]part.Transport{}
	for _, t := range inst.Transports {
		m[t.Name] = t
	}
	return m
}

// TestFaultsFirmware: a failure at any hypervisor call of a publish with
// the firmware transport, and a refused store write, leave libvirt, the
// data directory and the store as they were: the entry files of the new
// revision go, the previous definition is back.
func TestFaultsFirmware(t *testing.T) {
	t.Parallel()
	t.Run("create", func(t *testing.T) {
		faultMatrix(t, func(e *env) { withFirmware(e, true) }, func(e *env) error {
			_, err := e.apply(hvSpec)
			return err
		})
	})
	t.Run("re-apply", func(t *testing.T) {
		faultMatrix(t, func(e *env) {
			withFirmware(e, true)
			e.mustApply(hvSpec)
		}, func(e *env) error {
			_, err := e.apply(strings.Replace(hvSpec, "tag: data", "tag: data2", 1))
			return err
		})
	})
	t.Run("turned off", func(t *testing.T) {
		faultMatrix(t, func(e *env) {
			withFirmware(e, true)
			e.mustApply(hvSpec)
			withFirmware(e, false)
		}, func(e *env) error {
			_, err := e.apply(hvSpec)
			return err
		})
	})
}

// TestLibvirtFirmware against the real libvirtd: the entries are in the
// domain libvirt keeps; a publish while the domain runs changes the next
// boot's entries, not the running QEMU's, and instance show says so.
func TestLibvirtFirmware(t *testing.T) {
	t.Parallel() // its own domain; no NIC
	e, uri := realEnv(t)
	withFirmware(e, true)
	ctx := context.Background()
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	spec := "name: " + name + "\ndisks: [{name: vda, size: 8M, tag: root}, {name: sda, bus: scsi, size: 8M, tag: db, serial: d1}]\n"
	inst, err := e.apply(spec)
	if err != nil {
		t.Fatal(err)
	}
	checkFirmware(t, e, e.c.domains.(Hypervisor), name, inst.Revision)
	dump := virshOut(t, uri, "dumpxml", "--inactive", name)
	for _, n := range []string{metadata.FirmwareDevices, metadata.FirmwareUUID, metadata.FirmwareRevision} {
		if !strings.Contains(dump, "<entry name='"+n+"' file='"+virt.FirmwareFileName(filepath.Join(e.dir, "instances", name), 1, n)+"'/>") {
			t.Errorf("virsh dumpxml --inactive lacks entry %s:\n%s", n, dump)
		}
	}
	if _, err := e.c.Start(ctx, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.c.Stop(context.Background(), name, time.Second) })

	if _, err := e.apply(strings.Replace(spec, "tag: db", "tag: db2", 1)); err != nil {
		t.Fatal(err)
	}
	checkFirmware(t, e, e.c.domains.(Hypervisor), name, 2)
	got, err := e.c.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	ts := transportMap(got)
	t.Logf("transports while running: %+v", got.Transports)
	if ts[types.TransportHTTP].Revision != 2 || ts[types.TransportDrive].Revision != 2 {
		t.Errorf("service and drive: %+v, want revision 2", ts)
	}
	if fw := ts[types.TransportFirmware]; fw.Revision != 1 || fw.NextBoot != 2 || !strings.Contains(fw.Note, "fixed while the guest runs") {
		t.Errorf("firmware while running: %+v, want revision 1, next boot 2", fw)
	}
	live := virshOut(t, uri, "dumpxml", name)
	if !strings.Contains(live, "fw_cfg.1.revision") || strings.Contains(live, "fw_cfg.2.revision") {
		t.Errorf("the running domain's entries changed:\n%s", live)
	}
	if _, err := e.c.Stop(ctx, name, time.Second); err != nil {
		t.Fatal(err)
	}
	got, err = e.c.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if fw := transportMap(got)[types.TransportFirmware]; fw.Revision != 2 {
		t.Errorf("firmware after stop: %+v, want revision 2", fw)
	}
	if files := firmwareFilesOf(t, e, name); !slices.Equal(files, []string{"fw_cfg.2.devices", "fw_cfg.2.revision", "fw_cfg.2.uuid"}) {
		t.Errorf("files %v", files)
	}
}

// TestReconcileFirmware: instances published before the firmware
// transport was turned on get their entries from the reconciler, and lose
// them when it is turned off; then nothing more happens.
func TestReconcileFirmware(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.mustApply(hvSpec)
	withFirmware(e, true)
	if err := e.c.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	checkFirmware(t, e, e.hv, "app-1", 2)
	before := e.snapshot()
	if err := e.c.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a second pass changed things:\n%s", diffLines(before, after))
	}
	// An entry file lost behind hostctl's back (QEMU would not start).
	for _, f := range firmwareFilesOf(t, e, "app-1") {
		os.Remove(filepath.Join(e.dir, "instances", "app-1", f))
	}
	if err := e.c.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	checkFirmware(t, e, e.hv, "app-1", 3)

	withFirmware(e, false)
	if err := e.c.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	doc, _ := e.hv.XML(ctx, "app-1", false)
	if files, _ := virt.FirmwareFiles(doc); len(files) != 0 || len(firmwareFilesOf(t, e, "app-1")) != 0 {
		t.Errorf("firmware off: entries %v, files %v", files, firmwareFilesOf(t, e, "app-1"))
	}
}
