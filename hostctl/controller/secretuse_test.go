package controller_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/encryption/policy"
	"github.com/vmeta/vmeta/internal/keys"
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
	t.Parallel()
	e := controller.NewEnv(t)
	km := e.WithKeys()
	cat := e.Catalog()
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
	for name, policy := range map[string]string{"enc-a": policy.KeyDeletionOnImageDeletion, "enc-b": policy.KeyDeletionDoNotDelete} {
		props := map[string]string{"os_encrypt_key_id": shared.UUID, "os_encrypt_format": "luks", "os_encrypt_key_deletion_policy": policy}
		if _, err := cat.ImportImage(ctx, name, props, bytes.NewReader(file)); err != nil {
			t.Fatal(err)
		}
	}

	wantInUse(t, "secret delete of a secret two images name", cat.DeleteSecret(ctx, shared.UUID), "image enc-a", "image enc-b")
	if err := cat.DeleteImage(ctx, "enc-a"); err != nil {
		t.Fatalf("delete of image enc-a: %v", err)
	}
	if _, err := cat.Image(ctx, "enc-a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("image enc-a after its delete: %v", err)
	}
	if _, err := km.Get(ctx, shared.UUID); err != nil {
		t.Fatalf("deleting enc-a (on_image_deletion) took the secret enc-b names: %v", err)
	}
	wantInUse(t, "secret delete of a secret enc-b names", cat.DeleteSecret(ctx, shared.UUID), "image enc-b")

	// A disk over enc-b: its own secret and its backing copy are named by
	// the instance's block-device records.
	inst := e.MustApply("name: app-1\nproject_id: p1\nimage: enc-b\ndisks: [{name: vda, tag: root, encrypted: true}]\n")
	bd := inst.BlockDevices[0]
	if bd.EncryptionSecretUUID == "" || bd.BackingEncryptionSecretUUID == "" {
		t.Fatalf("block device %+v", bd)
	}
	wantInUse(t, "secret delete of a disk's secret", cat.DeleteSecret(ctx, bd.EncryptionSecretUUID), "disk vda of instance app-1")
	wantInUse(t, "secret delete of a backing copy", cat.DeleteSecret(ctx, bd.BackingEncryptionSecretUUID), "backing file of disk vda of instance app-1")

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
	wantInUse(t, "secret delete during a rotation", cat.DeleteSecret(ctx, user.UUID), "pending passphrase rotation")
	if err := km.DropPending(ctx, user.UUID); err != nil {
		t.Fatal(err)
	}
	if err := cat.DeleteSecret(ctx, user.UUID); err != nil {
		t.Errorf("secret delete of a secret nothing names: %v", err)
	}

	// The instance's delete takes its disk's secrets, not the image's.
	if err := e.Ctl().Delete(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{bd.EncryptionSecretUUID, bd.BackingEncryptionSecretUUID} {
		if _, err := km.Get(ctx, id); !errors.Is(err, keys.ErrNotFound) {
			t.Errorf("secret %s of the deleted instance's disk: %v", id, err)
		}
	}
	if err := cat.DeleteImage(ctx, "enc-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := km.Get(ctx, shared.UUID); err != nil {
		t.Fatalf("enc-b (do_not_delete) took its secret: %v", err)
	}
	if err := cat.DeleteSecret(ctx, shared.UUID); err != nil {
		t.Errorf("secret delete once nothing names it: %v", err)
	}
	if _, err := km.Get(ctx, shared.UUID); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("after its delete: %v", err)
	}
}

// TestImageDeleteSecretPolicy (issue 20, item 1): an image alone naming
// its secret under on_image_deletion takes it along.
func TestImageDeleteSecretPolicy(t *testing.T) {
	t.Parallel()
	e := controller.NewEnv(t)
	km := e.WithKeys()
	cat := e.Catalog()
	ctx := context.Background()
	sec, err := km.Create(ctx, keys.Request{Name: "img", ProjectID: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	pass, _ := km.Passphrase(ctx, sec.UUID)
	props := map[string]string{"os_encrypt_key_id": sec.UUID, "os_encrypt_format": "luks", "os_encrypt_key_deletion_policy": policy.KeyDeletionOnImageDeletion}
	if _, err := cat.ImportImage(ctx, "alone", props, bytes.NewReader(luksQcow2(t, pass))); err != nil {
		t.Fatal(err)
	}
	if err := cat.DeleteImage(ctx, "alone"); err != nil {
		t.Fatal(err)
	}
	if _, err := km.Get(ctx, sec.UUID); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("on_image_deletion, nothing else naming it: the secret stayed: %v", err)
	}
}
