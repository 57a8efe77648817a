package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
)

// imagePattern is what makeEncryptedImage writes at offset 0 of the
// image, so a read through an overlay shows the backing file was opened.
const imagePattern = "0x5a"

// makeEncryptedImage makes a LUKS qcow2 under a new key-manager secret
// of project, holding imagePattern in its first 64 KiB, and imports it
// into e's image catalog as name (os_encrypt_key_id naming the secret).
// It returns the secret. On the fake disk layer the image is a fake LUKS
// disk; else one made by the real qemu-img and qemu-io (realLUKSImage).
func makeEncryptedImage(t *testing.T, e *env, km KeyManager, name, project string) keys.Secret {
	t.Helper()
	ctx := context.Background()
	if e.fakeQemuImg != "" { // e is on the fake disk layer (fakedisk_test.go)
		sec, err := km.Create(ctx, keys.Request{Name: "image-" + name, ProjectID: project})
		if err != nil {
			t.Fatal(err)
		}
		pass, err := km.Passphrase(ctx, sec.UUID)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "src.qcow2")
		makeFakeEncryptedImage(t, p, pass)
		return importEncryptedImage(t, e, name, sec, p)
	}
	pass, p := realLUKSImage(t, name)
	sec, err := km.Create(ctx, keys.Request{Name: "image-" + name, ProjectID: project, Payload: pass})
	if err != nil {
		t.Fatal(err)
	}
	return importEncryptedImage(t, e, name, sec, p)
}

// realLUKSImages caches realLUKSImage's files for the test binary.
var realLUKSImages struct {
	sync.Mutex
	dir   string
	files map[string]string
}

// realLUKSImage is a 32 MiB LUKS qcow2 that holds imagePattern, made by
// the real qemu-img and qemu-io under a passphrase of its own (derived
// from name) once per test binary: each LUKS create costs qemu-img two
// PBKDF benchmarks (seconds of CPU), and the real-path tests import one
// image each. It returns the passphrase and the file (read-only: import
// copies it).
func realLUKSImage(t *testing.T, name string) (pass []byte, path string) {
	t.Helper()
	sum := sha256.Sum256([]byte("vmeta test image " + name))
	pass = []byte(hex.EncodeToString(sum[:]))
	c := &realLUKSImages
	c.Lock()
	defer c.Unlock()
	if p, ok := c.files[name]; ok {
		return pass, p
	}
	if c.dir == "" {
		dir, err := os.MkdirTemp("", "vmeta-luks-images-")
		if err != nil {
			t.Fatal(err)
		}
		c.dir, c.files = dir, map[string]string{}
		cleanups = append(cleanups, func() { os.RemoveAll(dir) })
	}
	p := filepath.Join(c.dir, name+".qcow2")
	tool := encryption.New(encryption.Options{QemuImg: testenv.LookPath(t, "qemu-img"), QemuIO: testenv.LookPath(t, "qemu-io"), IterTime: 10 * time.Millisecond})
	if err := tool.Create(context.Background(), encryption.Disk{Path: p, Size: "32M"}, pass); err != nil {
		t.Fatal(err)
	}
	if out, err := testenv.QemuIO(t, []string{"--object", "secret,id=s0,file=/dev/fd/3", "--image-opts",
		"driver=qcow2,file.filename=" + p + ",encrypt.key-secret=s0", "-c", "write -P " + imagePattern + " 0 64k"}, pass); err != nil {
		os.Remove(p)
		t.Fatalf("qemu-io write: %v: %s", err, out)
	}
	c.files[name] = p
	return pass, p
}

// importEncryptedImage imports the LUKS image at p, under secret sec,
// into e's catalog as name.
func importEncryptedImage(t *testing.T, e *env, name string, sec keys.Secret, p string) keys.Secret {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	img, err := e.Catalog().ImportImage(context.Background(), name, map[string]string{"os_encrypt_key_id": sec.UUID, "os_encrypt_format": "luks"}, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !img.Encrypted {
		t.Fatalf("imported image not encrypted: %+v", img)
	}
	return sec
}

// readThrough reads imagePattern at offset 0 of the overlay at p through
// its encrypted backing file, with the overlay's and the backing file's
// passphrases.
func readThrough(t *testing.T, p string, pass, backing []byte) error {
	t.Helper()
	out, err := testenv.QemuIO(t, []string{"--object", "secret,id=s0,file=/dev/fd/3", "--object", "secret,id=s1,file=/dev/fd/4", "-r", "-U", "--image-opts",
		"driver=qcow2,file.filename=" + p + ",encrypt.key-secret=s0,backing.encrypt.key-secret=s1", "-c", "read -P " + imagePattern + " 0 64k"}, pass, backing)
	if err != nil || strings.Contains(out, "Pattern verification failed") {
		return errors.New(out)
	}
	return nil
}

// TestEncryptedImageRoot: an instance's root disk over an encrypted
// image is an encrypted overlay with its own secret, and the instance
// gets its own copy of the image's passphrase
// (backing_encryption_secret_uuid) through which the image's data reads;
// start hands both to libvirt and stop takes both back; delete removes
// the instance's secrets and leaves the image's.
//
// On the fake disk layer (fakedisk_test.go): TestLibvirtEncryptedImage
// takes the same path through the real qemu-img, LUKS and libvirtd (QEMU
// opens the overlay and the image under the two secrets) and reads the
// image's data from such an overlay, flattened by a snapshot, with the
// real qemu-img.
func TestEncryptedImageRoot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	withFakeEncryption(t, e)
	ctx := context.Background()
	imgSec := makeEncryptedImage(t, e, e.dp().Keys, "enc-img", "p1")
	inst := e.mustApply("name: img-1\nproject_id: p1\nimage: enc-img\ndisks: [{name: vda, tag: root, encrypted: true}, {name: vdb, size: 4M}]\n")

	var root *struct{ own, backing string }
	for _, bd := range inst.BlockDevices {
		if bd.Disk != "vda" {
			// The policy: an encrypted image makes every disk encrypted;
			// a blank disk's backing file is never encrypted.
			if !bd.Encrypted || bd.BackingEncryptionSecretUUID != "" {
				t.Errorf("blank disk %+v (want encrypted, no backing secret)", bd)
			}
			continue
		}
		root = &struct{ own, backing string }{bd.EncryptionSecretUUID, bd.BackingEncryptionSecretUUID}
		if !bd.Encrypted || bd.EncryptionFormat != "luks" {
			t.Errorf("root disk record %+v", bd)
		}
	}
	if root == nil || root.own == "" || root.backing == "" || root.own == root.backing || root.backing == imgSec.UUID || root.own == imgSec.UUID {
		t.Fatalf("root secrets %+v (image's %s): want two of its own", root, imgSec.UUID)
	}
	imgPass, _ := e.dp().Keys.Passphrase(ctx, imgSec.UUID)
	ownPass, _ := e.dp().Keys.Passphrase(ctx, root.own)
	copyPass, err := e.dp().Keys.Passphrase(ctx, root.backing)
	if err != nil || !bytes.Equal(copyPass, imgPass) || bytes.Equal(ownPass, imgPass) {
		t.Fatalf("the backing copy must hold the image's passphrase and the disk its own (err %v)", err)
	}
	copySec, err := e.dp().Keys.Get(ctx, root.backing)
	if err != nil || copySec.ProjectID != "p1" || copySec.Owner == nil || copySec.Owner.InstanceName != "img-1" || copySec.Owner.Disk != "vda" {
		t.Fatalf("backing copy %+v %v", copySec, err)
	}
	p := filepath.Join(e.dir, "instances", "img-1", "disk-vda.qcow2")
	if err := readThroughAny(t, p, ownPass, copyPass); err != nil {
		t.Fatalf("the image's data does not read through the overlay: %s", err)
	}
	if err := readThroughAny(t, p, imgPass, copyPass); err == nil {
		t.Fatal("the overlay opens with the image's passphrase")
	}
	if err := e.dp().LUKS.Verify(ctx, p, ownPass, nil); err == nil {
		t.Fatal("the overlay's chain opens without the backing passphrase")
	}
	enc := 0
	for _, d := range devicesOf(t, e.st, inst.Spec.UUID) {
		if d.Type == "disk" && d.Encrypted != nil && *d.Encrypted {
			enc++
		}
	}
	if enc != 2 {
		t.Errorf("guest told %d disks encrypted, want 2", enc)
	}
	xml, err := e.hv.XML(ctx, "img-1", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<backingStore type=\"file\">", `uuid="` + root.own + `"`, `uuid="` + root.backing + `"`, "enc-img"} {
		if !strings.Contains(string(xml), want) {
			t.Errorf("domain XML lacks %s:\n%s", want, xml)
		}
	}
	if _, err := e.c.Start(ctx, "img-1"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{root.own, root.backing} {
		v, ok := e.hv.secretValue(id)
		if !ok {
			t.Fatalf("libvirt secret %s not defined at start", id)
		}
		want, _ := e.dp().Keys.Passphrase(ctx, id)
		if !bytes.Equal(v, want) {
			t.Errorf("libvirt secret %s has the wrong value", id)
		}
	}
	if _, err := e.c.Stop(ctx, "img-1", 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{root.own, root.backing} {
		if _, ok := e.hv.secretValue(id); ok {
			t.Errorf("libvirt secret %s still defined after stop", id)
		}
	}
	if err := e.c.Delete(ctx, "img-1"); err != nil {
		t.Fatal(err)
	}
	l, err := e.dp().Keys.List(ctx, "")
	if err != nil || len(l) != 1 || l[0].UUID != imgSec.UUID {
		t.Fatalf("secrets after delete: %+v %v (want only the image's %s)", l, err, imgSec.UUID)
	}
}

// TestEncryptedImageRefusals: a disk over an encrypted image is refused
// with 409, naming both sides, and nothing is made, when the image's
// secret belongs to another project and when the key manager does not
// have it (the policy already makes every disk of an instance from an
// encrypted image encrypted: no surprise decryption).
func TestEncryptedImageRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	withFakeEncryption(t, e) // refused before any LUKS work
	ctx := context.Background()
	makeEncryptedImage(t, e, e.dp().Keys, "enc-img", "p1")
	gone := makeEncryptedImage(t, e, e.dp().Keys, "lost-img", "p1")
	if err := e.dp().Keys.Delete(ctx, gone.UUID); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot()
	for _, tc := range []struct{ name, spec, want string }{
		{"other project", "name: r2\nproject_id: p2\nimage: enc-img\ndisks: [{name: vda, encrypted: true}]\n", `belongs to project "p1" and the instance to project "p2"`},
		{"secret gone", "name: r3\nproject_id: p1\nimage: lost-img\ndisks: [{name: vda, encrypted: true}]\n", "is not in the key manager"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.apply(tc.spec)
			if !errors.Is(err, store.ErrConflict) || !errors.Is(err, ErrEncryption) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("apply = %v, want a 409 naming %s", err, tc.want)
			}
			if after := e.snapshot(); after != before {
				t.Fatalf("refused apply left changes:\n%s", diffLines(before, after))
			}
		})
	}
}

const encImageSpec = "name: img-1\nproject_id: p1\nimage: enc-img\ndisks: [{name: vda, tag: root, encrypted: true}]\n"

// TestFaultsEncryptedImage fails every key-manager and LUKS step, then
// every libvirt and store step, of an apply over an encrypted image and
// of its start: nothing is left behind (the backing copy included).
func TestFaultsEncryptedImage(t *testing.T) {
	t.Parallel()
	setup := func(e *env) { makeEncryptedImage(e.t, e, e.dp().Keys, "enc-img", "p1") }
	apply := func(e *env) error { _, err := e.apply(encImageSpec); return err }
	t.Run("apply keys and qemu-img", func(t *testing.T) { encFaults(t, setup, apply) })
	t.Run("apply libvirt and store", func(t *testing.T) {
		faultMatrix(t, func(e *env) { withFakeEncryption(e.t, e); setup(e) }, apply)
	})
	start := func(e *env) error { _, err := e.c.Start(context.Background(), "img-1"); return err }
	t.Run("start libvirt", func(t *testing.T) {
		hvFaults(t, func(e *env) { withFakeEncryption(e.t, e); setup(e); e.mustApply(encImageSpec) }, start, nil)
	})
}

// TestSweepKeepsBackingCopy: the reconciler's sweep keeps the backing
// copy of a live instance's disk (it is in the block-device record),
// removes a stray libvirt secret of the backing file of a domain that
// does not run, and after the instance is gone from the store, deletes
// the copy.
func TestSweepKeepsBackingCopy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	withFakeEncryption(t, e)
	ctx := context.Background()
	imgSec := makeEncryptedImage(t, e, e.dp().Keys, "enc-img", "p1")
	inst := e.mustApply(encImageSpec)
	bd := inst.BlockDevices[0]
	if _, err := e.c.Start(ctx, "img-1"); err != nil {
		t.Fatal(err)
	}
	// A crash after stop, before the secrets were undefined.
	if err := e.hv.Destroy(ctx, "img-1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.hv.secretValue(bd.BackingEncryptionSecretUUID); !ok {
		t.Fatal("backing secret not defined at start")
	}
	if err := e.c.sweepSecrets(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.hv.secretValue(bd.BackingEncryptionSecretUUID); ok {
		t.Error("the backing file's libvirt secret of a stopped domain survived the sweep")
	}
	for _, id := range []string{bd.EncryptionSecretUUID, bd.BackingEncryptionSecretUUID, imgSec.UUID} {
		if _, err := e.dp().Keys.Get(ctx, id); err != nil {
			t.Errorf("sweep deleted secret %s of a live instance or image: %v", id, err)
		}
	}
	// The instance record goes without the clean-up (a crash in delete).
	if err := e.st.Store.Delete(ctx, "img-1"); err != nil {
		t.Fatal(err)
	}
	if err := e.c.sweepSecrets(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.dp().Keys.Get(ctx, bd.BackingEncryptionSecretUUID); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("backing copy of a gone instance not swept: %v", err)
	}
	if _, err := e.dp().Keys.Get(ctx, imgSec.UUID); err != nil {
		t.Errorf("the image's secret was swept: %v", err)
	}
}
