package controller

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/vmeta/vmeta/internal/keys"
)

// TestUnshelveFlattensEncryptedImageRoot: a root disk that is an
// encrypted overlay of an encrypted image (with the instance's copy of
// the image's secret for the backing file) comes back from a shelve as a
// standalone LUKS qcow2 under its own secret (same UUID) that reads the
// image's data; the backing copy is no longer used and is deleted after
// the unshelve, the image's own secret stays.
//
// On the fake disk layer (fakedisk_test.go): TestLibvirtEncryptedImage
// flattens such an overlay with the real qemu-img and LUKS (the convert a
// shelve makes) and reads the image's data from the copy, and
// TestLibvirtShelveUnshelve shelves and unshelves LUKS disks on the real
// libvirtd.
func TestUnshelveFlattensEncryptedImageRoot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	withFakeEncryption(t, e)
	ctx := context.Background()
	imgSec := makeEncryptedImage(t, e, e.dp().Keys, "enc-img", "p1")
	inst := e.mustApply(snapSrcSpec)
	bd := inst.BlockDevices[0]
	if bd.BackingEncryptionSecretUUID == "" {
		t.Fatalf("block device %+v has no backing copy", bd)
	}
	if _, err := e.c.Shelve(ctx, "src-1"); err != nil {
		t.Fatal(err)
	}
	got, err := e.c.Unshelve(ctx, "src-1")
	if err != nil {
		t.Fatal(err)
	}
	nb := got.BlockDevices[0]
	if nb.EncryptionSecretUUID != bd.EncryptionSecretUUID || nb.BackingEncryptionSecretUUID != "" || !nb.Encrypted {
		t.Errorf("after unshelve %+v, want secret %s and no backing secret", nb, bd.EncryptionSecretUUID)
	}
	root := filepath.Join(e.dir, "instances", "src-1", "disk-vda.qcow2")
	info, err := e.dp().LUKS.Inspect(ctx, root)
	if err != nil || !info.Encrypted || info.BackingFile != "" {
		t.Fatalf("root disk %s: %+v, %v; want LUKS without a backing file", root, info, err)
	}
	pass, _ := e.dp().Keys.Passphrase(ctx, bd.EncryptionSecretUUID)
	if err := readPattern(t, root, pass); err != nil {
		t.Errorf("the flattened root disk does not read the image's data: %v", err)
	}
	if _, err := e.dp().Keys.Get(ctx, bd.BackingEncryptionSecretUUID); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("the unused backing copy: %v, want deleted", err)
	}
	if _, err := e.dp().Keys.Get(ctx, imgSec.UUID); err != nil {
		t.Errorf("the image's own secret: %v", err)
	}
	if _, err := e.c.Start(ctx, "src-1"); err != nil {
		t.Errorf("start after unshelve (running): %v", err)
	}
}
