package controller

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
)

// luksQcow2 returns a 32 MiB LUKS qcow2 image encrypted under pass, made by
// the real qemu-img.
func luksQcow2(t *testing.T, pass []byte) []byte {
	t.Helper()
	p := filepath.Join(t.TempDir(), "src.qcow2")
	tool := encryption.New(encryption.Options{QemuImg: testenv.LookPath(t, "qemu-img"), QemuIO: testenv.LookPath(t, "qemu-io"), IterTime: 10 * time.Millisecond})
	if err := tool.Create(context.Background(), encryption.Disk{Path: p, Size: "32M"}, pass); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// realKeys replaces the key manager's fault wrapper by the manager itself
// (a *keys.Manager: pending rotations are seen).
func realKeys(t *testing.T, e *env) *keys.Manager {
	t.Helper()
	fk, ok := e.c.keys.(faultyKeys)
	if !ok {
		t.Fatalf("key manager %T", e.c.keys)
	}
	km, ok := fk.KeyManager.(*keys.Manager)
	if !ok {
		t.Fatalf("key manager %T", fk.KeyManager)
	}
	e.c.keys = km
	return km
}

func wantInUse(t *testing.T, what string, err error, holders ...string) {
	t.Helper()
	if !errors.Is(err, keys.ErrInUse) {
		t.Errorf("%s = %v, want refused as in use (409) naming %q", what, err, holders)
		return
	}
	for _, h := range holders {
		if !strings.Contains(err.Error(), h) {
			t.Errorf("%s = %v, want it to name %q", what, err, h)
		}
	}
}

// TestSecretDeleteOneRule (issue 20, item 1): every deletion of a secret
// goes through one in-use check. Two images name one secret: deleting
// the one whose policy is on_image_deletion deletes the image, not the
// secret the other still names; `secret delete` of a secret an image, a
// disk, a backing file or a pending rotation names is refused naming
// them; an instance's delete takes its own secrets only; once nothing
// names it the secret goes.
func TestSecretDeleteOneRule(t *testing.T) {
	e := newEnv(t)
	withEncryption(t, e)
	km := realKeys(t, e)
	ctx := context.Background()
	shared, err := km.Create(ctx, keys.Request{Name: "shared", ProjectID: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	pass, err := km.Passphrase(ctx, shared.UUID)
	if err != nil {
		t.Fatal(err)
	}
	file := luksQcow2(t, pass)
	for name, policy := range map[string]string{"enc-a": KeyDeletionOnImageDeletion, "enc-b": KeyDeletionDoNotDelete} {
		props := map[string]string{"os_encrypt_key_id": shared.UUID, "os_encrypt_format": "luks", "os_encrypt_key_deletion_policy": policy}
		if _, err := e.c.ImportImage(ctx, name, props, bytes.NewReader(file)); err != nil {
			t.Fatal(err)
		}
	}

	wantInUse(t, "secret delete of a secret two images name", e.c.DeleteSecret(ctx, shared.UUID), "image enc-a", "image enc-b")
	if err := e.c.DeleteImage(ctx, "enc-a"); err != nil {
		t.Fatalf("delete of image enc-a: %v", err)
	}
	if _, err := e.c.Image(ctx, "enc-a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("image enc-a after its delete: %v", err)
	}
	if _, err := km.Get(ctx, shared.UUID); err != nil {
		t.Fatalf("deleting enc-a (on_image_deletion) took the secret enc-b names: %v", err)
	}
	wantInUse(t, "secret delete of a secret enc-b names", e.c.DeleteSecret(ctx, shared.UUID), "image enc-b")

	// A disk over enc-b: its own secret and its backing copy are named by
	// the instance's block-device records.
	inst := e.mustApply("name: app-1\nproject_id: p1\nimage: enc-b\ndisks: [{name: vda, tag: root, encrypted: true}]\n")
	bd := inst.BlockDevices[0]
	if bd.EncryptionSecretUUID == "" || bd.BackingEncryptionSecretUUID == "" {
		t.Fatalf("block device %+v", bd)
	}
	wantInUse(t, "secret delete of a disk's secret", e.c.DeleteSecret(ctx, bd.EncryptionSecretUUID), "disk vda of instance app-1")
	wantInUse(t, "secret delete of a backing copy", e.c.DeleteSecret(ctx, bd.BackingEncryptionSecretUUID), "backing file of disk vda of instance app-1")

	// A user's secret with a rotation in progress.
	user, err := km.Create(ctx, keys.Request{Name: "mine", ProjectID: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	newPass, err := km.SetPending(ctx, user.UUID)
	if err != nil {
		t.Fatal(err)
	}
	clear(newPass)
	wantInUse(t, "secret delete during a rotation", e.c.DeleteSecret(ctx, user.UUID), "pending passphrase rotation")
	if err := km.DropPending(ctx, user.UUID); err != nil {
		t.Fatal(err)
	}
	if err := e.c.DeleteSecret(ctx, user.UUID); err != nil {
		t.Errorf("secret delete of a secret nothing names: %v", err)
	}

	// The instance's delete takes its disk's secrets, not the image's.
	if err := e.c.Delete(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{bd.EncryptionSecretUUID, bd.BackingEncryptionSecretUUID} {
		if _, err := km.Get(ctx, id); !errors.Is(err, keys.ErrNotFound) {
			t.Errorf("secret %s of the deleted instance's disk: %v", id, err)
		}
	}
	if err := e.c.DeleteImage(ctx, "enc-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := km.Get(ctx, shared.UUID); err != nil {
		t.Fatalf("enc-b (do_not_delete) took its secret: %v", err)
	}
	if err := e.c.DeleteSecret(ctx, shared.UUID); err != nil {
		t.Errorf("secret delete once nothing names it: %v", err)
	}
	if _, err := km.Get(ctx, shared.UUID); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("after its delete: %v", err)
	}
}

// TestImageDeleteSecretPolicy (issue 20, item 1): an image alone naming
// its secret under on_image_deletion takes it along.
func TestImageDeleteSecretPolicy(t *testing.T) {
	e := newEnv(t)
	withEncryption(t, e)
	ctx := context.Background()
	sec, err := e.c.keys.Create(ctx, keys.Request{Name: "img", ProjectID: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	pass, _ := e.c.keys.Passphrase(ctx, sec.UUID)
	props := map[string]string{"os_encrypt_key_id": sec.UUID, "os_encrypt_format": "luks", "os_encrypt_key_deletion_policy": KeyDeletionOnImageDeletion}
	if _, err := e.c.ImportImage(ctx, "alone", props, bytes.NewReader(luksQcow2(t, pass))); err != nil {
		t.Fatal(err)
	}
	if err := e.c.DeleteImage(ctx, "alone"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.keys.Get(ctx, sec.UUID); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("on_image_deletion, nothing else naming it: the secret stayed: %v", err)
	}
}

// TestImportImageKeyChecks (issue 20, item 2): an import naming a secret
// the key manager does not have, or one whose passphrase does not open
// the image's LUKS header, is refused naming the key id, and nothing is
// kept; the right secret opens a LUKS qcow2 and a raw LUKS file.
func TestImportImageKeyChecks(t *testing.T) {
	e := newEnv(t)
	withEncryption(t, e)
	ctx := context.Background()
	right, err := e.c.keys.Create(ctx, keys.Request{Name: "right", ProjectID: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := e.c.keys.Create(ctx, keys.Request{Name: "wrong", ProjectID: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	pass, _ := e.c.keys.Passphrase(ctx, right.UUID)
	qcow := luksQcow2(t, pass)
	raw := rawLUKS(t, pass)
	missing := keys.NewUUID()

	// (An import makes the image directory first.)
	if err := os.MkdirAll(filepath.Join(e.dir, "images"), 0o750); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot()
	for _, tc := range []struct {
		name, keyID string
		file        []byte
		want        string
	}{
		{"no such secret", missing, qcow, "names no secret"},
		{"wrong passphrase", wrong.UUID, qcow, "does not open"},
		{"wrong passphrase, raw LUKS", wrong.UUID, raw, "does not open"},
		{"not a uuid", "key-1", qcow, "UUID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.c.ImportImage(ctx, "img-x", map[string]string{"os_encrypt_key_id": tc.keyID, "os_encrypt_format": "luks"}, bytes.NewReader(tc.file))
			var se *model.SpecError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.keyID) || !strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), "properties[os_encrypt_key_id]") {
				t.Errorf("import = %v, want a field error naming properties[os_encrypt_key_id]=%s and %q", err, tc.keyID, tc.want)
			}
		})
	}
	if after := e.snapshot(); after != before {
		t.Errorf("refused imports left changes:\n%s", diffLines(before, after))
	}
	if imgs, err := e.c.Images(ctx); err != nil || len(imgs) != 0 {
		t.Errorf("images after refused imports: %v %v", imgs, err)
	}
	for name, file := range map[string][]byte{"good-qcow2": qcow, "good-raw": raw} {
		img, err := e.c.ImportImage(ctx, name, map[string]string{"os_encrypt_key_id": right.UUID, "os_encrypt_format": "luks"}, bytes.NewReader(file))
		if err != nil || !img.Encrypted {
			t.Errorf("import %s with its own secret: %+v %v", name, img, err)
		}
	}
}

// rawLUKS returns a 16 MiB raw LUKS file under pass (qemu-img create -f
// luks, the passphrase in a 0600 file).
func rawLUKS(t *testing.T, pass []byte) []byte {
	t.Helper()
	dir := t.TempDir()
	sf := filepath.Join(dir, "pass")
	if err := os.WriteFile(sf, pass, 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "raw.luks")
	out, err := exec.Command(testenv.LookPath(t, "qemu-img"), "create", "-q", "-f", "luks", "--object", "secret,id=s0,file="+sf,
		"-o", "key-secret=s0,iter-time=10", p, "16M").CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img create -f luks: %v: %s", err, out)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
