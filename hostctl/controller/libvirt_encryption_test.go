package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/testenv"
)

// TestLibvirtEncryptedStart: against the real libvirtd and QEMU, a domain
// with two LUKS disks starts only because hostctl hands libvirt each
// disk's passphrase (QEMU unlocks the disks at start); stop takes the
// libvirt secrets back, a stray secret is swept, and delete removes the
// key-manager secrets.
func TestLibvirtEncryptedStart(t *testing.T) {
	t.Parallel()
	e, uri, km := encryptedRealEnv(t)
	ctx := context.Background()
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	spec := "name: " + name + "\n" +
		"disks: [{name: vda, size: 8M, tag: root, encrypted: true}, {name: vdb, size: 8M, encrypted: true}, {name: vdc, size: 8M}]\n"
	inst, err := e.apply(spec)
	if err != nil {
		t.Fatal(err)
	}
	xml := virshOut(t, uri, "dumpxml", "--inactive", name)
	if n := strings.Count(xml, "<encryption format='luks'"); n != 2 {
		t.Fatalf("%d disks with <encryption format='luks'>, want 2:\n%s", n, xml)
	}
	secrets := func() string { return virshOut(t, uri, "secret-list") }
	for _, bd := range inst.BlockDevices {
		if bd.Encrypted && strings.Contains(secrets(), bd.EncryptionSecretUUID) {
			t.Fatalf("libvirt secret %s defined before start", bd.EncryptionSecretUUID)
		}
	}
	if _, err := e.c.Start(ctx, name); err != nil {
		t.Fatalf("start (QEMU must unlock both LUKS disks): %v", err)
	}
	for _, bd := range inst.BlockDevices {
		if bd.Encrypted && !strings.Contains(secrets(), bd.EncryptionSecretUUID) {
			t.Errorf("libvirt secret %s of %s missing while running", bd.EncryptionSecretUUID, bd.Disk)
		}
	}
	if _, err := e.c.Stop(ctx, name, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for _, bd := range inst.BlockDevices {
		if bd.Encrypted && strings.Contains(secrets(), bd.EncryptionSecretUUID) {
			t.Errorf("libvirt secret %s still defined after stop", bd.EncryptionSecretUUID)
		}
	}
	// A start without hostctl's secrets fails: QEMU cannot open the disks.
	if out, err := execCommand("virsh", "-q", "-c", uri, "start", name); err == nil {
		virshOut(t, uri, "destroy", name)
		t.Fatalf("virsh start succeeded without the secrets: %s", out)
	}
	if err := e.c.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	if l, _ := km.List(ctx, ""); len(l) != 0 {
		t.Errorf("key-manager secrets after delete: %+v", l)
	}
}

// TestLibvirtEncryptedImage: against the real libvirtd and QEMU 7.2, a
// domain whose root disk is an encrypted overlay of an encrypted image
// starts only because libvirt has both passphrases: the overlay's and
// the instance's copy of the image's, named by the explicit
// <backingStore>'s own <encryption>. Stop takes both back; delete removes
// the instance's secrets and keeps the image's.
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
	// A snapshot re-encrypted under a new secret boots encrypted on the
	// real libvirtd; deleting the image (on_image_deletion) deletes its
	// secret.
	snapImg, err := e.c.Snapshot(ctx, name, SnapshotRequest{Image: "snap-new", EncryptionKey: "new"})
	if err != nil {
		t.Fatal(err)
	}
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
