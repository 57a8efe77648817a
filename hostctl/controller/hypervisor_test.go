package controller

// Unit tests of the controller with a hypervisor: a hand-written fake
// (fakehv_test.go) stands in for libvirt; qemu-img, the store (bolt) and
// the config drive builder are real.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
	"github.com/vmeta/vmeta/internal/testenv"
)

// failingStore fails Put (and Delete) while failPut is set.
type failingStore struct {
	store.Store
	failPut, failDelete bool
}

func (s *failingStore) Put(ctx context.Context, inst store.Instance, doc store.Document, expect int64) (store.Instance, store.Document, error) {
	if s.failPut {
		return store.Instance{}, store.Document{}, fmt.Errorf("put: %w", errInjected)
	}
	return s.Store.Put(ctx, inst, doc, expect)
}

func (s *failingStore) Delete(ctx context.Context, name string) error {
	if s.failDelete {
		return fmt.Errorf("delete: %w", errInjected)
	}
	return s.Store.Delete(ctx, name)
}

type env struct {
	t       *testing.T
	dir     string
	st      *failingStore
	hv      *fakeHV
	c       *Controller
	qemuImg string
	// fileView, when set, shows a file of the data directory in a
	// snapshot instead of its hash, when it returns true.
	fileView func(path string) (string, bool)
	// fakeQemuImg is the fake qemu-img of the fake disk layer
	// (fakedisk_test.go) when e is on it.
	fakeQemuImg string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	qemuImg := testenv.LookPath(t, "qemu-img")
	dir := memTempDir(t)
	b, err := bolt.Open(filepath.Join(dir, "vmeta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	e := &env{t: t, dir: dir, st: &failingStore{Store: b}, hv: newFakeHV(), qemuImg: qemuImg}
	e.c = newController(e.st, Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler), Hypervisor: e.hv,
		QemuImg: qemuImg, DetachTimeout: 300 * time.Millisecond})
	registerParts(e, e.hv) // export_nicspart_test.go
	e.useGoImages()        // fakeimages_test.go: no qemu-img process per disk
	return e
}

// memTempDir is t.TempDir in memory: a directory in /dev/shm when it is
// a tmpfs. The data directory of a fake-hypervisor env gets the store's
// fsyncs and the disk files of every fault step (a sixth of a matrix's
// CPU on a disk); no QEMU opens it (realEnv keeps t.TempDir: libvirt's
// confinement may not allow /dev/shm).
func memTempDir(t *testing.T) string {
	t.Helper()
	var fs syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &fs); err != nil || fs.Type != 0x01021994 { // TMPFS_MAGIC
		return t.TempDir()
	}
	name := strings.Map(func(r rune) rune {
		if r == '/' || r == '*' || r < ' ' {
			return '_'
		}
		return r
	}, t.Name())
	dir, err := os.MkdirTemp("/dev/shm", "vmeta-"+name[:min(len(name), 64)]+"-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("memTempDir cleanup: %v", err)
		}
	})
	return dir
}

const hvSpec = `
name: app-1
addresses: [10.1.0.7, 127.0.0.9]
disks:
  - {name: vda, size: 16M, tag: root, serial: root-1}
  - {name: vdb, size: 8M, tag: data}
  - {name: sda, bus: scsi, size: 8M, tag: db, serial: db-1}
  - {name: sdb, bus: scsi, size: 8M}
nics:
  - {mac: "52:54:00:00:00:01", tag: front}
  - {mac: "52:54:00:00:00:02", tag: back, ips: [{address: 192.168.122.20/24}]}
`

func (e *env) apply(spec string) (*Instance, error) {
	return e.c.Apply(context.Background(), []byte(spec))
}

func (e *env) mustApply(spec string) *Instance {
	e.t.Helper()
	inst, err := e.apply(spec)
	if err != nil {
		e.t.Fatalf("apply: %v", err)
	}
	return inst
}

// snapshot is everything an operation may change: the store's records,
// documents and address index, the files of the data directory (but the
// bolt file itself) and the fake libvirt.
func (e *env) snapshot() string {
	e.t.Helper()
	ctx := context.Background()
	var b strings.Builder
	recs, err := e.st.Instances(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range recs {
		v, err := e.st.DocumentVersion(ctx, r.UUID)
		fmt.Fprintf(&b, "record %s %s rev=%d doc=%d(%v) addrs=%v\n%s\n", r.Name, r.UUID, r.Revision, v, err, r.Addresses, r.Spec)
		for _, a := range r.Addresses {
			owner, err := e.st.LookupAddress(ctx, a)
			fmt.Fprintf(&b, "address %s -> %s %v\n", a, owner, err)
		}
	}
	filepath.WalkDir(e.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == e.dir || strings.HasPrefix(d.Name(), "vmeta.db") {
			return err
		}
		rel, _ := filepath.Rel(e.dir, p)
		if d.IsDir() {
			fmt.Fprintf(&b, "dir %s\n", rel)
			return nil
		}
		if e.fileView != nil {
			if v, ok := e.fileView(p); ok {
				fmt.Fprintf(&b, "file %s %s\n", rel, v)
				return nil
			}
		}
		v, err := fileDigest(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "file %s %s\n", rel, v)
		return nil
	})
	// Store records besides instances: block-device records and
	// key-manager secrets (encryption.go).
	others, err := e.st.Records(ctx, "")
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range others {
		if strings.HasPrefix(r.Key, "blockdev/") || strings.HasPrefix(r.Key, "keys/secret/") || strings.HasPrefix(r.Key, "instance-vmstate/") {
			fmt.Fprintf(&b, "store record %s %x\n", r.Key, sha256.Sum256(r.Value))
		}
	}
	if e.hv != nil {
		b.WriteString(e.hv.snapshot())
	}
	return b.String()
}

// templateHeadBytes is how much of a blank-disk template a snapshot
// hashes.
const templateHeadBytes = 1 << 20

// qcow2HeaderBytes is how much of a plain qcow2 image a snapshot hashes:
// its header, header extensions and backing file name.
const qcow2HeaderBytes = 4096

// fileDigest is how a snapshot shows a file: a plain qcow2 image by its
// size and header (virtual size, backing file and format, the table
// offsets), anything else by the hash of its content. The controller
// never writes guest data into a plain image (it creates, resizes,
// converts, renames and removes them), and the test disks are blank, so
// hashing their data clusters adds nothing but time (a third of a fault
// step under -race); a blank-disk template by its size and first MiB;
// an encrypted qcow2 is hashed whole (its LUKS header — keyslots, a
// rotation's work — is the point), and so are the fake LUKS disks
// (fakedisk_test.go), the config drives and every record.
func fileDigest(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	head := make([]byte, qcow2HeaderBytes)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", err
	}
	head = head[:n]
	if isPlainQcow2Header(head) {
		return fmt.Sprintf("qcow2 size=%d header=%x", fi.Size(), sha256.Sum256(head)), nil
	}
	if filepath.Base(filepath.Dir(p)) == "_base" {
		// A blank-disk template (instances/_base): made once by mkfs or
		// mkswap, then only read, as a backing file. Its size and its
		// first MiB (the signatures) show it; hashing the rest (16 MiB
		// to GiBs of zeros) adds nothing.
		h := sha256.New()
		h.Write(head)
		if _, err := io.CopyN(h, f, templateHeadBytes-int64(len(head))); err != nil && !errors.Is(err, io.EOF) {
			return "", err
		}
		return fmt.Sprintf("template size=%d head=%x", fi.Size(), h.Sum(nil)), nil
	}
	h := sha256.New()
	h.Write(head)
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return fmt.Sprintf("%x", h.Sum(nil)), nil
}

// isPlainQcow2Header: head starts a qcow2 image that is not encrypted and
// whose backing file name lies within head.
func isPlainQcow2Header(head []byte) bool {
	if len(head) < 104 || string(head[:4]) != "QFI\xfb" {
		return false
	}
	be := binary.BigEndian
	cryptMethod := be.Uint32(head[32:36])
	backingEnd := be.Uint64(head[8:16]) + uint64(be.Uint32(head[16:20]))
	return cryptMethod == 0 && backingEnd <= uint64(len(head))
}

func devicesOf(t *testing.T, st store.Store, uuid string) []metadata.Device {
	t.Helper()
	doc, err := st.Document(context.Background(), uuid)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := metadata.DecodeTree(doc.Tree)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := tree.Get("openstack/latest/meta_data.json")
	var v struct {
		Devices []metadata.Device `json:"devices"`
	}
	if err := json.Unmarshal(md, &v); err != nil {
		t.Fatal(err)
	}
	return v.Devices
}

func TestApplyDefinesAndReadsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	inst := e.mustApply(hvSpec)
	if inst.State != "shutoff" {
		t.Errorf("state %q, want shutoff", inst.State)
	}
	// Addresses and DHCP leases.
	if want := []string{"10.1.0.7", "127.0.0.9", "192.168.122.20"}; !slices.Equal(inst.Spec.Addresses, want) {
		t.Errorf("addresses %v, want %v (the static NIC address added)", inst.Spec.Addresses, want)
	}
	hosts, _ := e.hv.DHCPHosts(ctx, "default")
	wantHosts := []virt.DHCPHost{{MAC: "52:54:00:00:00:01", IP: "10.1.0.7"}, {MAC: "52:54:00:00:00:02", IP: "192.168.122.20"}}
	if !slices.Equal(hosts, wantHosts) {
		t.Errorf("DHCP hosts %v, want %v", hosts, wantHosts)
	}
	// Every device got the address the (fake) hypervisor chose, and the
	// published devices and the config drive say so.
	doc, _ := e.hv.XML(ctx, "app-1", false)
	devs, err := virt.ParseDevices(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range inst.Spec.Disks {
		x, ok := devs.Disk(d.Name)
		if !ok || x.Address == "" || x.Address != d.Address {
			t.Errorf("disk %s: spec address %q, domain %+v", d.Name, d.Address, x)
		}
		if _, err := os.Stat(filepath.Join(e.dir, "instances", "app-1", "disk-"+d.Name+".qcow2")); err != nil {
			t.Errorf("disk image: %v", err)
		}
	}
	published := devicesOf(t, e.st, inst.Spec.UUID)
	if js(published) != js(inst.Devices) {
		t.Errorf("published devices %+v differ from the returned %+v", published, inst.Devices)
	}
	tree, _, err := configdrive.Read(filepath.Join(e.dir, "instances", "app-1", "disk.config"))
	if err != nil {
		t.Fatal(err)
	}
	md, _ := tree.Get("openstack/latest/meta_data.json")
	for _, d := range published {
		if d.Address == "none" || !strings.Contains(string(md), `"address":"`+d.Address+`"`) {
			t.Errorf("config drive lacks device %+v", d)
		}
	}
	if !strings.Contains(doc2s(doc), `ua-config-drive`) {
		t.Error("domain has no config drive")
	}

	// Re-applying the same spec redefines nothing and keeps the addresses.
	before := len(e.hv.calls)
	again := e.mustApply(hvSpec)
	if slices.Contains(e.hv.calls[before:], "Define") || slices.Contains(e.hv.calls[before:], "AddDHCPHost") {
		t.Errorf("re-apply of an unchanged spec called %v", e.hv.calls[before:])
	}
	if again.Revision != 2 || js(again.Devices) != js(inst.Devices) {
		t.Errorf("re-apply: revision %d, devices %+v (were %+v)", again.Revision, again.Devices, inst.Devices)
	}
}

func doc2s(b []byte) string { return string(b) }

func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func execCommand(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}

// TestReapplyShutoffRedefines: a spec that adds and removes devices of a
// shut-off domain redefines it, keeps the addresses of the unchanged
// devices, creates the new disk and deletes the removed one's image.
func TestReapplyShutoffRedefines(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.mustApply(hvSpec)
	changed := strings.Replace(hvSpec, "  - {name: sdb, bus: scsi, size: 8M}\n", "  - {name: vdc, size: 8M, tag: new}\n", 1)
	changed = strings.Replace(changed, `  - {mac: "52:54:00:00:00:01", tag: front}`+"\n", "", 1)
	inst := e.mustApply(changed)
	addr := func(in *model.Instance, name string) string {
		for _, d := range in.Disks {
			if d.Name == name {
				return d.Address
			}
		}
		return "(none)"
	}
	for _, n := range []string{"vda", "vdb", "sda"} {
		if addr(first.Spec, n) != addr(inst.Spec, n) {
			t.Errorf("disk %s moved from %s to %s", n, addr(first.Spec, n), addr(inst.Spec, n))
		}
	}
	if addr(inst.Spec, "vdc") == "" || addr(inst.Spec, "sdb") != "(none)" {
		t.Errorf("vdc %q, sdb %q", addr(inst.Spec, "vdc"), addr(inst.Spec, "sdb"))
	}
	dir := filepath.Join(e.dir, "instances", "app-1")
	if _, err := os.Stat(filepath.Join(dir, "disk-sdb.qcow2")); !os.IsNotExist(err) {
		t.Errorf("removed disk's image: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "disk-vdc.qcow2")); err != nil {
		t.Errorf("new disk's image: %v", err)
	}
	hosts, _ := e.hv.DHCPHosts(context.Background(), "default")
	// The removed NIC's lease is gone; the remaining NIC keeps its static one.
	if want := []virt.DHCPHost{{MAC: "52:54:00:00:00:02", IP: "192.168.122.20"}}; !slices.Equal(hosts, want) {
		t.Errorf("DHCP hosts %v, want %v", hosts, want)
	}
}

func TestReapplyRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.mustApply(hvSpec)
	if _, err := e.c.Start(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot()
	// New hardware on a running domain: refused, nothing changed.
	_, err := e.apply(strings.Replace(hvSpec, "  - {name: sdb, bus: scsi, size: 8M}\n", "", 1))
	if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "disk sdb removed") {
		t.Fatalf("err = %v, want ErrState naming the removed disk", err)
	}
	if after := e.snapshot(); after != before {
		t.Errorf("refused apply changed something:\n%s", diffLines(before, after))
	}
	// A tag change needs no new hardware.
	inst, err := e.apply(strings.Replace(hvSpec, "tag: data", "tag: data2", 1))
	if err != nil {
		t.Fatal(err)
	}
	if inst.State != "running" || findDevice(inst.Devices, "data2") == nil {
		t.Errorf("state %s devices %+v", inst.State, inst.Devices)
	}
}

// faultMatrix runs op once to count the hypervisor calls it makes, then
// again in fresh environments failing each of those calls in turn, and
// checks that every failure leaves the store, the files and libvirt as
// they were. It also fails the store write and qemu-img. Each failure is
// a parallel subtest with its own environment (setup runs in each: it
// must use e.t, not an outer test's t).
func faultMatrix(t *testing.T, setup func(e *env), op func(e *env) error) {
	t.Helper()
	ref := newEnv(t)
	setup(ref)
	start := ref.hv.callCount()
	if err := op(ref); err != nil {
		t.Fatalf("reference run: %v", err)
	}
	n := ref.hv.callCount() - start
	if n == 0 {
		t.Fatal("the operation made no hypervisor call")
	}
	check := func(t *testing.T, name string, e *env, before string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: no error", name)
			return
		}
		if errors.Is(err, errInjected) || errors.Is(err, store.ErrConflict) {
			t.Logf("%s: %v", name, err)
		}
		if after := e.snapshot(); after != before {
			t.Errorf("%s (%v) left changes behind:\n%s", name, err, diffLines(before, after))
		}
	}
	for k := 1; k <= n; k++ {
		faultStep(t, fmt.Sprintf("hv-%d-%s", k, ref.hv.calls[start+k-1]), func(t *testing.T) {
			e := newEnv(t)
			setup(e)
			before := e.snapshot()
			base := e.hv.callCount()
			e.hv.setFailAt(base + k)
			err := op(e)
			call := "?"
			if base+k <= e.hv.callCount() {
				call = e.hv.calls[base+k-1]
			}
			if err == nil && slices.Contains([]string{"XML", "List", "State"}, call) {
				// A read whose failure only costs a display (the state shown
				// after the commit) or a check (whether a live detach is done,
				// reported as a warning) may let the operation succeed.
				t.Logf("failing call %d/%d (%s): the operation succeeded regardless", k, n, call)
				return
			}
			check(t, fmt.Sprintf("failing call %d/%d (%s)", k, n, call), e, before, err)
		})
	}
	faultStep(t, "store-write", func(t *testing.T) {
		e := newEnv(t)
		setup(e)
		before := e.snapshot()
		e.st.failPut, e.st.failDelete = true, true
		check(t, "failing store write", e, before, op(e))
	})
	faultStep(t, "qemu-img-create", func(t *testing.T) {
		e := newEnv(t)
		setup(e)
		before := e.snapshot()
		e.failQemuImgCreate()
		if err := op(e); err != nil {
			check(t, "failing qemu-img", e, before, err)
		} // an operation that creates no disk succeeds
	})
}

// faultStep runs one step of a fault matrix as a parallel subtest.
func faultStep(t *testing.T, name string, step func(t *testing.T)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		step(t)
	})
}

// failQemuImgCreate makes e's disk maker fail as a dying qemu-img
// create may: after writing part of the new image.
func (e *env) failQemuImgCreate() { e.dp().Images = goImages{Images: e.dp().Catalog, fail: true} }

func diffLines(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	short := func(l string) string {
		if len(l) > 400 {
			return l[:400] + "…"
		}
		return l
	}
	for _, l := range al {
		if !slices.Contains(bl, l) {
			out = append(out, "- "+short(l))
		}
	}
	for _, l := range bl {
		if !slices.Contains(al, l) {
			out = append(out, "+ "+short(l))
		}
	}
	return strings.Join(out, "\n")
}

func TestFaultsApplyCreate(t *testing.T) {
	t.Parallel()
	faultMatrix(t, func(e *env) {}, func(e *env) error { _, err := e.apply(hvSpec); return err })
}

func TestFaultsApplyUpdate(t *testing.T) {
	t.Parallel()
	changed := strings.Replace(hvSpec, "  - {name: sdb, bus: scsi, size: 8M}\n", "  - {name: vdc, size: 8M, tag: new}\n", 1)
	changed = strings.Replace(changed, `  - {mac: "52:54:00:00:00:01", tag: front}`+"\n", `  - {mac: "52:54:00:00:00:03", tag: side}`+"\n", 1)
	faultMatrix(t, func(e *env) { e.mustApply(hvSpec) }, func(e *env) error { _, err := e.apply(changed); return err })
}

func TestFaultsDelete(t *testing.T) {
	t.Parallel()
	for _, running := range []bool{false, true} {
		t.Run(fmt.Sprintf("running=%t", running), func(t *testing.T) {
			setup := func(e *env) {
				e.mustApply(hvSpec)
				if running {
					if _, err := e.c.Start(context.Background(), "app-1"); err != nil {
						e.t.Fatal(err)
					}
				}
			}
			faultMatrix(t, setup, func(e *env) error { return e.c.Delete(context.Background(), "app-1") })
		})
	}
	// A failing store delete (after the domain and leases went) too.
	e := newEnv(t)
	e.mustApply(hvSpec)
	before := e.snapshot()
	e.st.failDelete = true
	if err := e.c.Delete(context.Background(), "app-1"); err == nil {
		t.Fatal("delete succeeded")
	}
	if after := e.snapshot(); after != before {
		t.Errorf("failed delete left changes:\n%s", diffLines(before, after))
	}
}

// TestRefusedBeforeLibvirt: requests hostctl refuses never reach a
// mutating libvirt call, and change nothing.
func TestRefusedBeforeLibvirt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mutating := []string{"Define", "Remove", "Start", "Destroy", "AttachDevice", "DetachDevice", "AddDHCPHost", "AddDHCPHostConfig", "RemoveDHCPHost"}
	e := newEnv(t)
	e.mustApply(hvSpec)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(e.dir, "instances", "evil")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(e.dir, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "base.qcow2"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		op   func() error
		is   error
		text string
	}{
		{"unknown bus", func() error { _, err := e.apply("name: b\ndisks: [{name: vda, bus: floppy, size: 1M}]\n"); return err }, model.ErrInvalidSpec, "disks[0].bus"},
		{"ide on q35", func() error { _, err := e.apply("name: b\ndisks: [{name: hda, bus: ide, size: 1M}]\n"); return err }, model.ErrInvalidSpec, "q35 has no IDE"},
		{"bad tag on a PCI device", func() error {
			_, err := e.apply("name: b\npci_devices: [{address: \"0000:03:00.0\", tag: a/b}]\n")
			return err
		}, model.ErrInvalidSpec, "pci_devices[0].tag"},
		{"two NICs one tag", func() error {
			_, err := e.apply("name: b\nnics: [{mac: \"52:54:00:00:01:01\", tag: x}, {mac: \"52:54:00:00:01:02\", tag: x}]\n")
			return err
		}, model.ErrInvalidSpec, "nics[1].tag"},
		{"disk without size or image", func() error { _, err := e.apply("name: b\ndisks: [{name: vda}]\n"); return err }, model.ErrInvalidSpec, "disks[0].size"},
		{"image outside the image dir", func() error {
			_, err := e.apply("name: b\nimage: ../" + filepath.Base(outside) + "/base.qcow2\ndisks: [{name: vda}]\n")
			return err
		}, model.ErrInvalidSpec, "image"},
		{"missing image", func() error { _, err := e.apply("name: b\nimage: nope\ndisks: [{name: vda}]\n"); return err }, model.ErrInvalidSpec, "no such image"},
		{"instance dir links outside", func() error { _, err := e.apply("name: evil\ndisks: [{name: vda, size: 1M}]\n"); return err }, model.ErrInvalidSpec, "outside the data directory"},
		{"serial too long for virtio", func() error {
			_, err := e.apply("name: b\ndisks: [{name: vda, size: 1M, serial: abcdefghijklmnopqrstuvwxyz}]\n")
			return err
		}, model.ErrInvalidSpec, "truncates"},
		{"attach: duplicate disk tag", func() error {
			_, err := e.c.AttachDisk(ctx, "app-1", types.DiskRequest{Tag: "db"})
			return err
		}, model.ErrInvalidSpec, "unique"},
		{"attach: target of the config drive", func() error {
			_, err := e.c.AttachDisk(ctx, "app-1", types.DiskRequest{Tag: "x", Bus: "sata", Target: configDriveTarget(t, e)})
			return err
		}, model.ErrInvalidSpec, "config drive"},
		{"attach: unknown bus", func() error {
			_, err := e.c.AttachDisk(ctx, "app-1", types.DiskRequest{Tag: "x", Bus: "floppy"})
			return err
		}, model.ErrInvalidSpec, "unknown bus"},
		{"attach: bad size", func() error {
			_, err := e.c.AttachDisk(ctx, "app-1", types.DiskRequest{Tag: "x", Size: "lots"})
			return err
		}, model.ErrInvalidSpec, "size"},
		{"attach: bad tag", func() error {
			_, err := e.c.AttachDisk(ctx, "app-1", types.DiskRequest{Tag: "a/b"})
			return err
		}, model.ErrInvalidSpec, "tag"},
		{"attach-nic: duplicate tag", func() error {
			_, err := e.c.AttachNIC(ctx, "app-1", types.NICRequest{Tag: "front"})
			return err
		}, model.ErrInvalidSpec, "nics[2].tag"},
		{"attach-nic: duplicate MAC", func() error {
			_, err := e.c.AttachNIC(ctx, "app-1", types.NICRequest{Tag: "z", MAC: "52:54:00:00:00:01"})
			return err
		}, model.ErrInvalidSpec, "mac"},
		{"attach: --live on a shut-off domain", func() error {
			_, err := e.c.AttachDisk(ctx, "app-1", types.DiskRequest{Tag: "x", Affect: types.Affect{Live: true}})
			return err
		}, ErrState, "--live"},
		{"detach: unknown tag", func() error {
			_, err := e.c.DetachDisk(ctx, "app-1", types.DetachRequest{Tag: "nope"})
			return err
		}, store.ErrNotFound, "nope"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := e.snapshot()
			calls := len(e.hv.calls)
			err := tc.op()
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("err = %v; want %v mentioning %q", err, tc.is, tc.text)
			}
			for _, c := range e.hv.calls[calls:] {
				if slices.Contains(mutating, c) {
					t.Errorf("libvirt was changed (%s) before the request was refused", c)
				}
			}
			if after := e.snapshot(); after != before {
				t.Errorf("refused request changed something:\n%s", diffLines(before, after))
			}
		})
	}
}

func configDriveTarget(t *testing.T, e *env) string {
	doc, _ := e.hv.XML(context.Background(), "app-1", true)
	devs, err := virt.ParseDevices(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs.Disks {
		if d.Alias == virt.ConfigDriveAlias {
			return d.Target
		}
	}
	t.Fatal("no config drive")
	return ""
}

func TestImageBackedDisk(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.dp().Images = e.dp().Catalog // the real qemu-img create of an overlay (outside the libvirt tests)
	images := filepath.Join(e.dir, "images")
	if err := os.MkdirAll(images, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := execCommand(e.qemuImg, "create", "-q", "-f", "qcow2", filepath.Join(images, "debian.qcow2"), "32M"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	e.mustApply("name: img-1\nimage: debian\ndisks: [{name: vda, tag: root}, {name: vdb, size: 4M}]\n")
	out, err := execCommand(e.qemuImg, "info", "--output=json", filepath.Join(e.dir, "instances", "img-1", "disk-vda.qcow2"))
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var info struct {
		BackingFile string `json:"backing-filename"`
		VirtualSize int64  `json:"virtual-size"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatal(err)
	}
	if info.BackingFile != filepath.Join(images, "debian.qcow2") || info.VirtualSize != 32<<20 {
		t.Errorf("vda: backing %q size %d", info.BackingFile, info.VirtualSize)
	}
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.mustApply(hvSpec)
	inst, err := e.c.Start(ctx, "app-1")
	if err != nil || inst.State != "running" {
		t.Fatalf("start: %v, state %q", err, inst.State)
	}
	// The fake guest ignores ACPI: stop powers it off after the timeout.
	inst, err = e.c.Stop(ctx, "app-1", 300*time.Millisecond)
	if err != nil || inst.State != "shutoff" || len(inst.Warnings) != 1 {
		t.Fatalf("stop: %v, state %q, warnings %v", err, inst.State, inst.Warnings)
	}
	if _, err := e.c.Stop(ctx, "app-1", time.Second); err != nil {
		t.Errorf("stopping a stopped instance: %v", err)
	}
	// The config drive is rebuilt when missing.
	drive := filepath.Join(e.dir, "instances", "app-1", "disk.config")
	os.Remove(drive)
	if _, err := e.c.Start(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := configdrive.Read(drive); err != nil {
		t.Errorf("rebuilt config drive: %v", err)
	}
}

func TestDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	before := e.snapshot()
	e.mustApply(hvSpec)
	if _, err := e.c.Start(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	after := e.snapshot()
	// Only the (empty) instances directory may remain.
	if d := diffLines(before, after); d != "+ dir instances" {
		t.Errorf("delete left:\n%s", d)
	}
}

// TestReconcile drives the reconciler with events: a device removed
// behind hostctl's back leaves the metadata, a domain undefined behind its
// back marks the instance missing, a reconnect reconciles everything.
func TestReconcile(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	inst := e.mustApply(hvSpec)
	e.hv.events = make(chan virt.Event, 64)
	rc := e.c.startReconciler() // export_reconcile_test.go
	t.Cleanup(func() { rc.Close(); close(e.hv.events) })

	e.hv.removeDeviceBehindBack("app-1", "sda")
	e.hv.events <- virt.Event{Kind: virt.EventDeviceRemoved, Domain: "app-1", DeviceAlias: "ua-disk-sda"}
	waitFor(t, "disk sda to leave the metadata", func() bool {
		return findDevice(devicesOf(t, e.st, inst.Spec.UUID), "db") == nil
	})
	e.hv.removeDeviceBehindBack("app-1", "52:54:00:00:00:02")
	e.hv.events <- virt.Event{Kind: virt.EventDisconnected}
	e.hv.events <- virt.Event{Kind: virt.EventReconnected}
	waitFor(t, "the NIC to leave the metadata and its lease the network", func() bool {
		hosts, _ := e.hv.DHCPHosts(ctx, "default")
		return findDevice(devicesOf(t, e.st, inst.Spec.UUID), "back") == nil && len(hosts) == 1
	})
	got, err := e.c.Get(ctx, "app-1")
	if err != nil || got.State != "shutoff" {
		t.Fatalf("get: %v %q", err, got.State)
	}
	e.hv.mu.Lock()
	delete(e.hv.domains, "app-1")
	e.hv.mu.Unlock()
	e.hv.events <- virt.Event{Kind: virt.EventUndefined, Domain: "app-1"}
	waitFor(t, "the instance to be marked missing", func() bool { return rc.Missing("app-1") })
	if got, _ := e.c.Get(ctx, "app-1"); got.State != StateMissing {
		t.Errorf("state %q, want missing", got.State)
	}
	list, _ := e.c.List(ctx)
	if len(list) != 1 || list[0].State != StateMissing || list[0].Revision != 3 {
		t.Errorf("list: %+v", list[0])
	}
	if _, err := e.c.Start(ctx, "app-1"); !errors.Is(err, ErrState) {
		t.Errorf("start of a missing domain: %v", err)
	}
	// Applying again defines it again.
	if inst, err := e.apply(hvSpec); err != nil || inst.State != "shutoff" {
		t.Fatalf("re-apply: %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestNoHypervisor(t *testing.T) {
	dir := t.TempDir()
	b, err := bolt.Open(filepath.Join(dir, "vmeta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := New(b, Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	if _, err := c.Apply(ctx, []byte("name: a\ndisks: [{name: vda, tag: t, address: \"0000:00:05.0\"}]\n")); err != nil {
		t.Fatal(err)
	}
	for name, op := range map[string]func() error{
		"start":       func() error { _, err := c.Start(ctx, "a"); return err },
		"stop":        func() error { _, err := c.Stop(ctx, "a", 0); return err },
		"attach-disk": func() error { _, err := c.AttachDisk(ctx, "a", types.DiskRequest{Tag: "x"}); return err },
		"detach-nic":  func() error { _, err := c.DetachNIC(ctx, "a", types.DetachRequest{Tag: "x"}); return err },
	} {
		if err := op(); !errors.Is(err, ErrNoHypervisor) {
			t.Errorf("%s without a hypervisor: %v", name, err)
		}
	}
	if inst, _ := c.Get(ctx, "a"); inst.State != "" {
		t.Errorf("state %q without a hypervisor", inst.State)
	}
}

func TestRevert(t *testing.T) {
	var log []string
	c := &Controller{log: slog.New(slog.DiscardHandler)}
	run := func(fail bool) error {
		var err error
		func() {
			r := revert.New(c.log, "test")
			defer r.Fail(&err)
			r.Add("one", func(context.Context) error { log = append(log, "undo one"); return nil })
			r.Add("two", func(context.Context) error { log = append(log, "undo two"); return errors.New("stuck") })
			if fail {
				err = errors.New("step three failed")
				return
			}
			r.Success()
		}()
		return err
	}
	if err := run(false); err != nil || len(log) != 0 {
		t.Fatalf("success: %v %v", err, log)
	}
	err := run(true)
	if !slices.Equal(log, []string{"undo two", "undo one"}) {
		t.Errorf("undo order %v", log)
	}
	if err == nil || !strings.Contains(err.Error(), "step three failed") || !strings.Contains(err.Error(), "two: stuck") {
		t.Errorf("error %v", err)
	}
}

// config_drive: false defines the domain without a cdrom and writes no
// drive, while the metadata is published as always; changing it is a
// hardware change, refused while the domain runs.
func TestNoConfigDrive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	drive := filepath.Join(e.dir, "instances", "app-1", "disk.config")
	hasCdrom := func() bool {
		t.Helper()
		doc, err := e.hv.XML(ctx, "app-1", false)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(string(doc), `device="cdrom"`) || strings.Contains(string(doc), virt.ConfigDriveAlias)
	}
	noDrive := hvSpec + "config_drive: false\n"
	inst := e.mustApply(noDrive)
	if hasCdrom() {
		t.Error("config_drive: false, but the domain has a cdrom")
	}
	if _, err := os.Stat(drive); !os.IsNotExist(err) {
		t.Errorf("config_drive: false, but %s: %v", drive, err)
	}
	if inst.ConfigDrive != "" {
		t.Errorf("instance names a config drive %q", inst.ConfigDrive)
	}
	if findDevice(devicesOf(t, e.st, inst.Spec.UUID), "data") == nil {
		t.Error("published metadata lacks the tagged disk")
	}
	// Start does not rebuild a drive the instance does not have.
	if _, err := e.c.Start(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(drive); !os.IsNotExist(err) {
		t.Errorf("start wrote %s: %v", drive, err)
	}
	// A metadata change of the running domain needs no medium.
	if _, err := e.apply(strings.Replace(noDrive, "tag: data", "tag: data2", 1)); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot()
	_, err := e.apply(hvSpec)
	if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "config_drive false -> true") {
		t.Fatalf("err = %v, want ErrState naming config_drive", err)
	}
	if after := e.snapshot(); after != before {
		t.Errorf("refused apply changed something:\n%s", diffLines(before, after))
	}
	if _, err := e.c.Stop(ctx, "app-1", 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// Off: the drive comes, and goes again.
	e.mustApply(hvSpec)
	if !hasCdrom() {
		t.Error("config_drive back to true, but the domain has no cdrom")
	}
	if _, _, err := configdrive.Read(drive); err != nil {
		t.Errorf("config drive: %v", err)
	}
	e.mustApply(noDrive)
	if hasCdrom() {
		t.Error("config_drive: false again, but the domain kept its cdrom")
	}
	if _, err := os.Stat(drive); !os.IsNotExist(err) {
		t.Errorf("config_drive: false again, but %s: %v", drive, err)
	}
}

// TestFileDigest: a snapshot shows a plain qcow2 by its size and header,
// so a resize or another backing file shows; an encrypted image and any
// other file by their whole content.
func TestFileDigest(t *testing.T) {
	t.Parallel()
	qemuImg := testenv.LookPath(t, "qemu-img")
	dir := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		if out, err := execCommand(qemuImg, args...); err != nil {
			t.Fatalf("qemu-img %v: %v: %s", args, err, out)
		}
	}
	digest := func(p string) string {
		t.Helper()
		v, err := fileDigest(p)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	a, b, over := filepath.Join(dir, "a.qcow2"), filepath.Join(dir, "b.qcow2"), filepath.Join(dir, "over.qcow2")
	run("create", "-q", "-f", "qcow2", a, "8M")
	run("create", "-q", "-f", "qcow2", b, "8M")
	plain := digest(a)
	if !strings.HasPrefix(plain, "qcow2 size=") || digest(b) != plain {
		t.Errorf("two blank images of a size: %q and %q, want the same size and header", plain, digest(b))
	}
	run("resize", "-q", a, "16M")
	if digest(a) == plain {
		t.Error("a resize does not show")
	}
	run("create", "-q", "-f", "qcow2", "-b", a, "-F", "qcow2", over)
	overA := digest(over)
	os.Remove(over)
	run("create", "-q", "-f", "qcow2", "-b", b, "-F", "qcow2", over, "16M")
	if digest(over) == overA {
		t.Error("another backing file does not show")
	}
	fake := filepath.Join(dir, "fake.qcow2")
	makeFakeEncryptedImage(t, fake, []byte("pass"))
	if v := digest(fake); strings.HasPrefix(v, "qcow2") {
		t.Errorf("a fake LUKS disk shows as %q, want its content's hash", v)
	}
	// A blank-disk template by its size and first MiB.
	tpl := filepath.Join(dir, "_base")
	if err := os.Mkdir(tpl, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, content := range []struct {
		size int64
		at   int64
	}{{4 << 20, 0}, {4 << 20, 1 << 10}, {8 << 20, 0}} {
		p := filepath.Join(tpl, fmt.Sprint("t", i))
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		f.Truncate(content.size)
		f.WriteAt([]byte("signature"), content.at)
		f.Close()
	}
	t0, t1, t2 := digest(filepath.Join(tpl, "t0")), digest(filepath.Join(tpl, "t1")), digest(filepath.Join(tpl, "t2"))
	if !strings.HasPrefix(t0, "template size=4194304 ") || t0 == t1 || t0 == t2 {
		t.Errorf("templates: %q, %q (the signature moved), %q (another size)", t0, t1, t2)
	}
	// A LUKS qcow2's header is not that of a plain image: hashed whole.
	head := make([]byte, 104)
	copy(head, "QFI\xfb")
	head[35] = 2 // crypt_method LUKS
	if isPlainQcow2Header(head) {
		t.Error("an encrypted qcow2 header is taken for a plain one")
	}
}
