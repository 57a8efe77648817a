package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
)

// Shelve, unshelve, rescue and unrescue with the fake hypervisor
// (fakehv_test.go) and the real qemu-img/qemu-io LUKS tool; the same on
// the real libvirtd in shelve_libvirt_test.go.

// writePattern writes imagePattern into the first 64 KiB of the LUKS
// qcow2 at p (pass nil: a plain qcow2), or into the fake LUKS disk at p
// (fakedisk_test.go).
func writePattern(t *testing.T, p string, pass []byte) {
	t.Helper()
	if ok, err := fakeWritePattern(p, pass); ok {
		if err != nil {
			t.Fatalf("fake write: %v", err)
		}
		return
	}
	args := []string{"-f", "qcow2", p, "-c", "write -P " + imagePattern + " 0 64k"}
	var secrets [][]byte
	if pass != nil {
		args = []string{"--object", "secret,id=s0,file=/dev/fd/3", "--image-opts", "driver=qcow2,file.filename=" + p + ",encrypt.key-secret=s0", "-c", "write -P " + imagePattern + " 0 64k"}
		secrets = [][]byte{pass}
	}
	if out, err := testenv.QemuIO(t, args, secrets...); err != nil {
		t.Fatalf("qemu-io write: %v: %s", err, out)
	}
}

// readPattern reads imagePattern back from the LUKS qcow2 (or the fake
// LUKS disk) at p with pass (-U: the domain may run).
func readPattern(t *testing.T, p string, pass []byte) error {
	t.Helper()
	if ok, err := fakeReadPattern(p, pass, nil); ok {
		return err
	}
	out, err := testenv.QemuIO(t, []string{"--object", "secret,id=s0,file=/dev/fd/3", "-r", "-U", "--image-opts",
		"driver=qcow2,file.filename=" + p + ",encrypt.key-secret=s0", "-c", "read -P " + imagePattern + " 0 64k"}, pass)
	if err != nil || strings.Contains(out, "Pattern verification failed") {
		return fmt.Errorf("qemu-io read: %w: %s", err, out)
	}
	return nil
}

func diskSecretsOf(inst *Instance) map[string]string {
	out := map[string]string{}
	for _, bd := range inst.BlockDevices {
		if bd.Encrypted {
			out[bd.Disk] = bd.EncryptionSecretUUID
		}
	}
	return out
}

// refusedIn checks that every instance operation on name is refused with
// ErrState naming state, and changes nothing.
func refusedIn(t *testing.T, e *env, name, state string) {
	t.Helper()
	ctx := context.Background()
	before := e.snapshot()
	ops := map[string]func() error{
		"start":    func() error { _, err := e.c.Start(ctx, name); return err },
		"stop":     func() error { _, err := e.c.Stop(ctx, name, 0); return err },
		"reboot":   func() error { _, err := e.c.Reboot(ctx, name, true); return err },
		"resize":   func() error { _, err := e.c.Resize(ctx, name, "f.big"); return err },
		"rebuild":  func() error { _, err := e.c.Rebuild(ctx, name, "deb2"); return err },
		"snapshot": func() error { _, err := e.c.Snapshot(ctx, name, SnapshotRequest{Image: "snap-x"}); return err },
		"attach":   func() error { _, err := e.c.AttachDisk(ctx, name, types.DiskRequest{Tag: "x", Size: "8M"}); return err },
		"shelve":   func() error { _, err := e.c.Shelve(ctx, name); return err },
		"rescue":   func() error { _, err := e.c.Rescue(ctx, name, RescueRequest{Image: "plain-img"}); return err },
		"apply":    func() error { _, err := e.apply(encSpec); return err },
	}
	for op, f := range ops {
		if err := f(); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), state) {
			t.Errorf("%s of a %s instance = %v, want ErrState naming %s", op, state, err, state)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("refused operations left changes:\n%s", diffLines(before, after))
	}
}

// TestShelveUnshelve: shelve keeps the stopped instance's encrypted root
// disk as an image under the root disk's own secret and releases the
// domain, the files and the libvirt secrets, keeping the key-manager
// secrets; every other operation is refused, the reconciler changes
// nothing; unshelve makes the disks again (the root disk with the same
// secret UUID and passphrase, the data written before the shelve read
// back), starts the instance and deletes the image.
//
// On the fake disk layer (fakedisk_test.go): TestLibvirtShelveUnshelve
// takes the real qemu-img's, LUKS's and libvirtd's path of both
// operations and reads the data back through them.
func TestShelveUnshelve(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	withFakeEncryption(t, e)
	ctx := context.Background()
	inst := e.mustApply(encSpec)
	secs := diskSecretsOf(inst)
	vda := filepath.Join(e.dir, "instances", "app-1", "disk-vda.qcow2")
	pass, err := e.dp().Keys.Passphrase(ctx, secs["vda"])
	if err != nil {
		t.Fatal(err)
	}
	writePattern(t, vda, pass)

	if _, err := e.c.Start(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Shelve(ctx, "app-1"); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "stop it first") {
		t.Errorf("shelve of a running instance = %v", err)
	}
	if _, err := e.c.Stop(ctx, "app-1", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	got, err := e.c.Shelve(ctx, "app-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateShelved {
		t.Errorf("state after shelve %q", got.State)
	}
	if _, ok := e.hv.domains["app-1"]; ok {
		t.Error("the domain is still defined")
	}
	if _, err := os.Stat(filepath.Join(e.dir, "instances", "app-1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("instance directory after shelve: %v", err)
	}
	if ss, _ := e.hv.Secrets(ctx, ""); len(ss) != 0 {
		t.Errorf("libvirt secrets after shelve: %+v", ss)
	}
	for d, id := range secs {
		if _, err := e.dp().Keys.Get(ctx, id); err != nil {
			t.Errorf("secret of %s gone after shelve: %v", d, err)
		}
	}
	img, err := e.Catalog().Image(ctx, "app-1-shelved")
	if err != nil {
		t.Fatal(err)
	}
	if img.Properties["os_encrypt_key_id"] != secs["vda"] || img.Properties["os_encrypt_key_deletion_policy"] != "do_not_delete" {
		t.Errorf("shelved image properties %v, want the root disk's secret %s, do_not_delete", img.Properties, secs["vda"])
	}
	if err := readImage(t, e, "app-1-shelved", pass); err != nil {
		t.Errorf("the shelved image does not read the root disk's data with its passphrase: %v", err)
	}
	list, err := e.c.List(ctx)
	if err != nil || len(list) != 1 || list[0].State != StateShelved {
		t.Errorf("list = %+v, %v", list, err)
	}

	flavorSetup(e) // a flavor and an image for the refusals
	e.fileView = nil
	refusedIn(t, e, "app-1", StateShelved)
	before := e.snapshot()
	if err := e.Catalog().DeleteImage(ctx, "app-1-shelved"); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "app-1") {
		t.Errorf("delete of the shelved image = %v", err)
	}
	if err := e.c.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if after := e.snapshot(); after != before {
		t.Errorf("reconcile of a shelved instance changed:\n%s", diffLines(before, after))
	}
	if g, _ := e.c.Get(ctx, "app-1"); g.State != StateShelved {
		t.Errorf("state after reconcile %q", g.State)
	}

	got, err = e.c.Unshelve(ctx, "app-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != "running" {
		t.Errorf("state after unshelve %q", got.State)
	}
	if after := diskSecretsOf(got); !mapsEqual(after, secs) {
		t.Errorf("secrets after unshelve %v, want %v (the same)", after, secs)
	}
	if err := readPattern(t, vda, pass); err != nil {
		t.Errorf("root disk after unshelve: %v", err)
	}
	if _, err := e.Catalog().Image(ctx, "app-1-shelved"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("shelved image after unshelve: %v", err)
	}
	for d, id := range secs {
		if _, ok := e.hv.secretValue(id); !ok {
			t.Errorf("libvirt secret of %s not defined for the start", d)
		}
	}
	if _, err := e.c.Unshelve(ctx, "app-1"); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "not shelved") {
		t.Errorf("unshelve of a running instance = %v", err)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestShelvedDelete: deleting a shelved instance deletes its shelved
// image, its secrets and its state record.
func TestShelvedDelete(t *testing.T) {
	e := newEnv(t)
	withFakeEncryption(t, e) // TestLibvirtShelveUnshelve takes the real path
	ctx := context.Background()
	e.mustApply(encSpec)
	if _, err := e.c.Shelve(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Catalog().Image(ctx, "app-1-shelved"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("shelved image after delete: %v", err)
	}
	if l, _ := e.dp().Keys.List(ctx, ""); len(l) != 0 {
		t.Errorf("secrets after delete: %+v", l)
	}
	if recs, _ := e.st.Records(ctx, vmStatePrefix); len(recs) != 0 {
		t.Errorf("state records after delete: %+v", recs)
	}
}

// failingRecords fails the n-th record write (PutRecord, DeleteRecord).
type failingRecords struct {
	inner  store.Records
	mu     sync.Mutex
	calls  int
	failAt int
}

func (r *failingRecords) write(op string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.calls == r.failAt {
		return fmt.Errorf("%s: %w", op, errInjected)
	}
	return nil
}

func (r *failingRecords) PutRecord(ctx context.Context, key string, value []byte, expect int64) (store.Record, error) {
	if err := r.write("PutRecord " + key); err != nil {
		return store.Record{}, err
	}
	return r.inner.PutRecord(ctx, key, value, expect)
}

func (r *failingRecords) DeleteRecord(ctx context.Context, key string, expect int64) error {
	if err := r.write("DeleteRecord " + key); err != nil {
		return err
	}
	return r.inner.DeleteRecord(ctx, key, expect)
}

func (r *failingRecords) Record(ctx context.Context, key string) (store.Record, error) {
	return r.inner.Record(ctx, key)
}

func (r *failingRecords) Records(ctx context.Context, prefix string) ([]store.Record, error) {
	return r.inner.Records(ctx, prefix)
}

// opFaults fails, in turn, every hypervisor call, every key-manager and
// LUKS tool call, every record write and qemu-img's image creation that
// op makes (counted in a reference run), each in a fresh env made by
// setup (a parallel subtest): op must fail and leave everything as it
// was — files, store, libvirt, every secret. A failing read whose only
// cost is the display after the commit may let op succeed.
func opFaults(t *testing.T, setup func(e *env) *faults, op func(e *env) error) {
	t.Helper()
	ref := newEnv(t)
	rf := setup(ref)
	recs := &failingRecords{inner: ref.dp().Records}
	ref.dp().Records = recs
	hv0, f0 := ref.hv.callCount(), len(rf.calls)
	if err := op(ref); err != nil {
		t.Fatalf("reference run: %v", err)
	}
	nHV, nF, nRec := ref.hv.callCount()-hv0, len(rf.calls)-f0, recs.calls
	check := func(t *testing.T, what string, e *env, before string, err error, mayPass bool) {
		t.Helper()
		if err == nil {
			if !mayPass {
				t.Errorf("%s: no error", what)
			}
			return
		}
		if after := e.snapshot(); after != before {
			t.Errorf("%s (%v) left changes behind:\n%s", what, err, diffLines(before, after))
		}
	}
	for k := 1; k <= nHV; k++ {
		faultStep(t, fmt.Sprintf("hv-%d-%s", k, ref.hv.calls[hv0+k-1]), func(t *testing.T) {
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
			check(t, fmt.Sprintf("failing hypervisor call %d/%d (%s)", k, nHV, call), e, before, err, slices.Contains([]string{"XML", "List", "State", "Secrets", "Shutdown"}, call))
		})
	}
	for k := 1; k <= nF; k++ {
		faultStep(t, fmt.Sprintf("keys-luks-%d-%s", k, rf.calls[f0+k-1]), func(t *testing.T) {
			e := newEnv(t)
			f := setup(e)
			before := e.snapshot()
			f.failAt = len(f.calls) + k
			err := op(e)
			check(t, fmt.Sprintf("failing key/LUKS call %d/%d (%s)", k, nF, f.calls[len(f.calls)-1]), e, before, err, false)
		})
	}
	for k := 1; k <= nRec; k++ {
		faultStep(t, fmt.Sprintf("record-%d", k), func(t *testing.T) {
			e := newEnv(t)
			setup(e)
			before := e.snapshot()
			e.dp().Records = &failingRecords{inner: e.dp().Records, failAt: k}
			check(t, fmt.Sprintf("failing record write %d/%d", k, nRec), e, before, op(e), false)
		})
	}
	faultStep(t, "qemu-img-create", func(t *testing.T) {
		e := newEnv(t)
		setup(e)
		before := e.snapshot()
		e.failQemuImgCreate()
		if err := op(e); err != nil {
			check(t, "failing qemu-img create", e, before, err, true)
		}
	})
}

// shelveSetup is the instance of the shelve fault matrices, on the fake
// disk layer (fakedisk_test.go).
func shelveSetup(e *env) *faults { return shelveSetupWith(e, withFakeEncryption) }

// shelveSetupWith makes the faultSpec instance with the encryption enc
// gives (withEncryption: the real qemu-img and LUKS).
func shelveSetupWith(e *env, enc func(*testing.T, *env) *faults) *faults {
	// The image catalog's directory exists (a shelve adds an image to it,
	// and its undo removes the image, not the catalog).
	if err := os.MkdirAll(filepath.Join(e.dir, "images"), 0o750); err != nil {
		e.t.Fatal(err)
	}
	f := enc(e.t, e)
	e.mustApply(faultSpec)
	return f
}

// faultSpec is encSpec made small for the fault matrices (each step of
// an operation is failed in a fresh env): an encrypted root disk and an
// encrypted data disk, which unshelve makes again under its secret.
const faultSpec = "name: app-1\nproject_id: p1\ndisks: [{name: vda, size: 8M, tag: root, encrypted: true}, {name: vdb, size: 8M, encrypted: true}]\n"

func TestFaultsShelve(t *testing.T) {
	t.Parallel() // minutes each (two LUKS disks made per case): overlap them
	testenv.LookPath(t, "qemu-io")
	opFaults(t, shelveSetup, func(e *env) error { _, err := e.c.Shelve(context.Background(), "app-1"); return err })
}

func TestFaultsUnshelve(t *testing.T) {
	t.Parallel() // minutes each (two LUKS disks made per case): overlap them
	testenv.LookPath(t, "qemu-io")
	opFaults(t, func(e *env) *faults {
		f := shelveSetup(e)
		if _, err := e.c.Shelve(context.Background(), "app-1"); err != nil {
			e.t.Fatal(err)
		}
		return f
	}, func(e *env) error { _, err := e.c.Unshelve(context.Background(), "app-1"); return err })
}

// rescueSetup: the encSpec instance, running, and a plain and an
// encrypted image (of its project) to rescue it with, on the fake disk
// layer (the fault matrices).
func rescueSetup(e *env) *faults { return rescueSetupWith(e, withFakeEncryption) }

// rescueSetupWith is rescueSetup with the encryption enc gives
// (withEncryption: the real qemu-img and LUKS).
func rescueSetupWith(e *env, enc func(*testing.T, *env) *faults) *faults {
	f := shelveSetupWith(e, enc)
	makeEncryptedImage(e.t, e, e.dp().Keys, "enc-img", "p1")
	if _, err := e.Catalog().ImportImage(context.Background(), "plain-img", nil, bytes.NewReader(plainPatternImage(e.t))); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.c.Start(context.Background(), "app-1"); err != nil {
		e.t.Fatal(err)
	}
	return f
}

// TestRescueUnrescue: a rescue boots a rescue disk over the image as
// the first disk, the root disk as vdb; the rescue disk is encrypted if
// and only if the image is, under the rescue image's own secret (no
// key-manager secret is made: issue 20 item 5) through a new libvirt
// secret that unrescue removes; the image's secret cannot be deleted
// during the rescue; the reconciler leaves the rescue definition alone;
// unrescue restores the definition.
//
// On the fake disk layer (fakedisk_test.go; the plain image's rescue disk
// is a real plain overlay): TestLibvirtRescue takes the real qemu-img's,
// LUKS's and libvirtd's path of a rescue with either image.
func TestRescueUnrescue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		image     string
		encrypted bool
	}{{"plain-img", false}, {"enc-img", true}} {
		t.Run(tc.image, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			rescueSetup(e)
			ctx := context.Background()
			origXML := normalizeXML(e.hv.domains["app-1"].xml)
			secretsBefore, _ := e.dp().Keys.List(ctx, "")
			if _, err := e.c.Rescue(ctx, "app-1", RescueRequest{Image: "no-such"}); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("rescue with a missing image = %v", err)
			}
			got, err := e.c.Rescue(ctx, "app-1", RescueRequest{Image: tc.image, TimeoutSeconds: 0.2})
			if err != nil {
				t.Fatal(err)
			}
			if got.State != StateRescue {
				t.Errorf("state %q", got.State)
			}
			d := e.hv.domains["app-1"]
			if !d.running {
				t.Error("the rescue domain does not run")
			}
			first := strings.Index(d.xml, "disk.rescue")
			rootAt := strings.Index(d.xml, "disk-vda.qcow2")
			if first < 0 || rootAt < first || !strings.Contains(d.xml, `dev="vdb"`) || strings.Contains(d.xml, "disk-vdb.qcow2") {
				t.Errorf("rescue domain disks:\n%s", d.xml)
			}
			rescue := filepath.Join(e.dir, "instances", "app-1", "disk.rescue")
			info, err := e.dp().LUKS.Inspect(ctx, rescue)
			if err != nil {
				t.Fatal(err)
			}
			if info.Encrypted != tc.encrypted {
				t.Errorf("rescue disk encrypted=%t, image encrypted=%t", info.Encrypted, tc.encrypted)
			}
			bds, _, _ := e.c.loadBlockDevices(ctx, got.Spec.UUID)
			if _, has := bds.Disks[rescueDisk]; has {
				t.Errorf("a rescue disk block-device record (a secret copy): %+v", bds.Disks[rescueDisk])
			}
			if during, _ := e.dp().Keys.List(ctx, ""); len(during) != len(secretsBefore) {
				t.Errorf("the rescue made key-manager secrets: %d, before %d", len(during), len(secretsBefore))
			}
			st, _, _ := e.c.vmStateOf(ctx, got.Spec.UUID)
			libvirtID := st.RescueLibvirtSecret
			if tc.encrypted {
				img, _ := e.Catalog().Image(ctx, "enc-img")
				imgID := img.Properties["os_encrypt_key_id"]
				imgPass, _ := e.dp().Keys.Passphrase(ctx, imgID)
				if st.RescueSecret != imgID || libvirtID == "" || libvirtID == imgID {
					t.Errorf("rescue state: secret %q (image's %s), libvirt secret %q", st.RescueSecret, imgID, libvirtID)
				}
				if v, ok := e.hv.secretValue(libvirtID); !ok || string(v) != string(imgPass) {
					t.Error("no libvirt secret with the image's passphrase for the rescue disk")
				}
				if !strings.Contains(d.xml, libvirtID) {
					t.Errorf("the rescue domain does not name libvirt secret %s:\n%s", libvirtID, d.xml)
				}
				if err := readThroughAny(t, rescue, imgPass, imgPass); err != nil {
					t.Errorf("the rescue disk does not read the image's data with the image's passphrase: %v", err)
				}
				if err := e.Catalog().DeleteSecret(ctx, imgID); !errors.Is(err, keys.ErrInUse) || !strings.Contains(err.Error(), "rescue disk of instance app-1") {
					t.Errorf("delete of the rescue image's secret during the rescue = %v", err)
				}
			} else if err := readPlain(t, rescue); err != nil {
				t.Errorf("the plain rescue disk does not read the image's data: %v", err)
			}
			// Another rescue, a shelve, a reconcile: nothing changes.
			refusedIn(t, e, "app-1", StateRescue)
			before := e.snapshot()
			if err := e.c.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			if after := e.snapshot(); after != before {
				t.Errorf("reconcile of a rescued instance changed:\n%s", diffLines(before, after))
			}
			if err := e.Catalog().DeleteImage(ctx, tc.image); !errors.Is(err, store.ErrConflict) {
				t.Errorf("delete of the rescue image during the rescue = %v", err)
			}

			got, err = e.c.Unrescue(ctx, "app-1")
			if err != nil {
				t.Fatal(err)
			}
			if got.State != "running" {
				t.Errorf("state after unrescue %q", got.State)
			}
			if x := normalizeXML(e.hv.domains["app-1"].xml); x != origXML {
				t.Errorf("definition after unrescue:\n%s", diffLines(origXML, x))
			}
			if fileExists(rescue) || fileExists(rescue+".old") {
				t.Error("rescue disk left")
			}
			if tc.encrypted {
				if _, ok := e.hv.secretValue(libvirtID); ok {
					t.Error("the rescue disk's libvirt secret outlived the rescue")
				}
				if _, err := e.dp().Keys.Get(ctx, st.RescueSecret); err != nil {
					t.Errorf("the rescue image's secret: %v", err)
				}
			}
			if after, _ := e.dp().Keys.List(ctx, ""); len(after) != len(secretsBefore) {
				t.Errorf("secrets after unrescue %d, before %d", len(after), len(secretsBefore))
			}
			if _, err := e.c.Unrescue(ctx, "app-1"); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "not in rescue") {
				t.Errorf("unrescue of a running instance = %v", err)
			}
		})
	}
}

// readPlain reads imagePattern through the plain overlay at p.
func readPlain(t *testing.T, p string) error {
	t.Helper()
	out, err := testenv.QemuIO(t, []string{"-r", "-U", "-f", "qcow2", p, "-c", "read -P " + imagePattern + " 0 64k"})
	if err != nil || strings.Contains(out, "Pattern verification failed") {
		return fmt.Errorf("qemu-io read: %w: %s", err, out)
	}
	return nil
}

// TestRescueRefusals: bad input is a 400 naming the field, a shelved
// instance and a double rescue a 409; nothing changes.
func TestRescueRefusals(t *testing.T) {
	e := newEnv(t)
	rescueSetup(e)
	ctx := context.Background()
	before := e.snapshot()
	for _, req := range []RescueRequest{{}, {Image: "../x"}, {Image: "plain-img", TimeoutSeconds: -1}} {
		var se *model.SpecError
		_, err := e.c.Rescue(ctx, "app-1", req)
		if err == nil || errors.Is(err, store.ErrConflict) || !errors.As(err, &se) {
			t.Errorf("Rescue(%+v) = %v, want a field error", req, err)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("refused rescues left changes:\n%s", diffLines(before, after))
	}
}

// noShutdownWait is the rescue timeout of the fault matrices: one
// nanosecond, over before the shutdown's first state poll, so the
// operation makes the same hypervisor calls in every run (Shutdown, the
// fake guest ignores it, Destroy). With 10 ms the poll ran once or, when
// the test was descheduled for 10 ms between the deadline and the first
// poll (a loaded machine), not at all: a step's calls then shifted by one
// from the reference run's and the last step failed no call ("no
// error"). A failing state poll returns from the stop where a failing
// Destroy does (before the undo step that starts the domain again), so
// the matrix still fails that path.
const noShutdownWait = 1e-9

// The fault matrices rescue with the encrypted image (every step of the
// plain image's rescue is one of its steps, but for the plain overlay's
// qemu-img create, failed here too).
func TestFaultsRescue(t *testing.T) {
	t.Parallel() // minutes each (two LUKS disks made per case): overlap them
	testenv.LookPath(t, "qemu-io")
	opFaults(t, rescueSetup, func(e *env) error {
		_, err := e.c.Rescue(context.Background(), "app-1", RescueRequest{Image: "enc-img", TimeoutSeconds: noShutdownWait})
		return err
	})
	e := newEnv(t)
	rescueSetup(e)
	before := e.snapshot()
	e.failQemuImgCreate()
	if _, err := e.c.Rescue(context.Background(), "app-1", RescueRequest{Image: "plain-img", TimeoutSeconds: noShutdownWait}); !errors.Is(err, ErrState) && err == nil {
		t.Error("rescue with a failing qemu-img create succeeded")
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a failed plain rescue left changes:\n%s", diffLines(before, after))
	}
}

func TestFaultsUnrescue(t *testing.T) {
	t.Parallel() // minutes each (two LUKS disks made per case): overlap them
	testenv.LookPath(t, "qemu-io")
	opFaults(t, func(e *env) *faults {
		f := rescueSetup(e)
		if _, err := e.c.Rescue(context.Background(), "app-1", RescueRequest{Image: "enc-img", TimeoutSeconds: noShutdownWait}); err != nil {
			e.t.Fatal(err)
		}
		return f
	}, func(e *env) error { _, err := e.c.Unrescue(context.Background(), "app-1"); return err })
}
