package controller

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/testenv"
)

// TestLibvirtEncryptedImage: against the real libvirtd and QEMU 7.2, a
// domain whose root disk is an encrypted overlay of an encrypted image
// starts only because libvirt has both passphrases: the overlay's and
// the instance's copy of the image's, named by the explicit
// <backingStore>'s own <encryption>. Stop takes both back. Snapshots of
// the stopped instance, re-encrypted and decrypted, read the image's data
// (the real qemu-img's and LUKS's path of a snapshot); the re-encrypted
// one boots. Delete removes the instance's secrets and keeps the image's.
func TestLibvirtEncryptedImage(t *testing.T) {
	t.Parallel()
	e, uri, km := encryptedRealEnv(t)
	ctx := context.Background()
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	imgSec := makeEncryptedImage(t, e, km, "enc-img", "p1")
	inst, err := e.apply("name: " + name + "\nproject_id: p1\nimage: enc-img\ndisks: [{name: vda, tag: root, encrypted: true}]\n")
	if err != nil {
		t.Fatal(err)
	}
	var own, backing string
	for _, bd := range inst.BlockDevices {
		if bd.Disk == "vda" {
			own, backing = bd.EncryptionSecretUUID, bd.BackingEncryptionSecretUUID
		}
	}
	if own == "" || backing == "" {
		t.Fatalf("block devices %+v", inst.BlockDevices)
	}
	xml := virshOut(t, uri, "dumpxml", "--inactive", name)
	for _, want := range []string{"<backingStore type='file'>", "uuid='" + own + "'", "uuid='" + backing + "'"} {
		if !strings.Contains(xml, want) {
			t.Fatalf("libvirt kept no %s:\n%s", want, xml)
		}
	}
	if _, err := e.c.Start(ctx, name); err != nil {
		t.Fatalf("start (QEMU must unlock the overlay and its encrypted backing file): %v", err)
	}
	secrets := func() string { return virshOut(t, uri, "secret-list") }
	for _, id := range []string{own, backing} {
		if !strings.Contains(secrets(), id) {
			t.Errorf("libvirt secret %s missing while running", id)
		}
	}
	live := virshOut(t, uri, "dumpxml", name)
	if !strings.Contains(live, "uuid='"+backing+"'") {
		t.Errorf("the running domain's backing store lost its encryption:\n%s", live)
	}
	if _, err := e.c.Stop(ctx, name, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{own, backing} {
		if strings.Contains(secrets(), id) {
			t.Errorf("libvirt secret %s still defined after stop", id)
		}
	}
	// With the overlay's passphrase alone QEMU cannot open the chain: the
	// backing file is really opened with its own secret.
	ownPass, err := km.Passphrase(ctx, own)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.dp().Secrets.DefineSecret(ctx, virt.LibvirtSecret{UUID: own, Usage: e.c.secretUsage(inst.Spec.UUID, "vda")}, ownPass); err != nil {
		t.Fatal(err)
	}
	if out, err := execCommand("virsh", "-q", "-c", uri, "start", name); err == nil {
		virshOut(t, uri, "destroy", name)
		t.Fatalf("virsh start succeeded without the backing file's secret: %s", out)
	} else if !strings.Contains(string(out), backing) {
		t.Logf("start without the backing secret failed: %s", out)
	}
	if err := e.dp().Secrets.UndefineSecret(ctx, own); err != nil {
		t.Fatal(err)
	}
	// A snapshot flattens the overlay with the real qemu-img: re-encrypted
	// under a new secret (--encryption-key new; the other choices differ
	// only in the passphrase the copy gets: TestSnapshotEncryptionKeys),
	// it is a LUKS qcow2 that reads the image's data with the new
	// secret's passphrase; decrypted (none), a plain one that reads it.
	snapImg, err := e.c.Snapshot(ctx, name, SnapshotRequest{Image: "snap-new", EncryptionKey: "new"})
	if err != nil {
		t.Fatal(err)
	}
	if p := snapImg.Properties; p["os_encrypt_format"] != "luks" || p["os_encrypt_cipher"] != "aes-xts-plain64" || p["os_decrypt_size"] != "33554432" {
		t.Errorf("new: %v", p)
	}
	newPass, err := km.Passphrase(ctx, snapImg.Properties["os_encrypt_key_id"])
	if err != nil || bytes.Equal(newPass, ownPass) {
		t.Errorf("new: the snapshot's secret (%v) must hold a passphrase of its own", err)
	}
	if !qemuImgEncrypted(t, filepath.Join(e.dir, "images", snapImg.File)) {
		t.Error("new: qemu-img does not find the image encrypted")
	}
	if err := readImage(t, e, "snap-new", newPass); err != nil {
		t.Errorf("new: the flattened image does not read the data: %v", err)
	}
	none, err := e.c.Snapshot(ctx, name, SnapshotRequest{Image: "snap-none", EncryptionKey: "none"})
	if err != nil {
		t.Fatal(err)
	}
	if len(none.Properties) != 0 || qemuImgEncrypted(t, filepath.Join(e.dir, "images", none.File)) {
		t.Errorf("none: properties %v, or qemu-img finds it encrypted", none.Properties)
	}
	if err := readImage(t, e, "snap-none", nil); err != nil {
		t.Errorf("none: the decrypted image does not read the data: %v", err)
	}
	// The re-encrypted snapshot boots encrypted on the real libvirtd;
	// deleting the image (on_image_deletion) deletes its secret.
	name2 := name + "-s"
	testenv.CleanupDomain(t, uri, name2)
	booted, err := e.apply("name: " + name2 + "\nproject_id: p1\nimage: snap-new\ndisks: [{name: vda, tag: root}]\n")
	if err != nil {
		t.Fatal(err)
	}
	if bd := booted.BlockDevices[0]; !bd.Encrypted || bd.BackingEncryptionSecretUUID == "" {
		t.Fatalf("from an encrypted snapshot: %+v", bd)
	}
	if _, err := e.c.Start(ctx, name2); err != nil {
		t.Fatalf("start from the encrypted snapshot: %v", err)
	}
	if _, err := e.c.Stop(ctx, name2, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(ctx, name2); err != nil {
		t.Fatal(err)
	}
	if err := e.Catalog().DeleteImage(ctx, "snap-new"); err != nil {
		t.Fatal(err)
	}
	if _, err := km.Get(ctx, snapImg.Properties["os_encrypt_key_id"]); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("the snapshot's secret outlived its image: %v", err)
	}
	if err := e.c.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	if l, _ := km.List(ctx, ""); len(l) != 1 || l[0].UUID != imgSec.UUID {
		t.Errorf("key-manager secrets after delete: %+v (want only the image's)", l)
	}
}

// encryptedRealEnv is realEnv with a key manager and the real qemu-img
// LUKS tool (a short PBKDF iteration time), and a cleanup that removes
// whatever libvirt secrets a failure left.
func encryptedRealEnv(t *testing.T) (*env, string, *keys.Manager) {
	t.Helper()
	e, uri := realEnv(t)
	km, err := keys.Open(context.Background(), e.st, e.dir, keys.Options{Host: "local"})
	if err != nil {
		t.Fatal(err)
	}
	e.dp().Keys = km
	e.dp().LUKS = encryption.New(encryption.Options{QemuImg: testenv.LookPath(t, "qemu-img"), QemuIO: testenv.LookPath(t, "qemu-io"), IterTime: 20 * time.Millisecond})
	t.Cleanup(func() {
		if ss, err := e.dp().Secrets.Secrets(context.Background(), e.c.secretPrefix()); err == nil {
			for _, s := range ss {
				_ = e.dp().Secrets.UndefineSecret(context.Background(), s.UUID)
			}
		}
	})
	return e, uri, km
}
