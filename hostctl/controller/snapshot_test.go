package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
)

// readImage reads imagePattern at offset 0 of a catalog image: with pass
// when it is encrypted, plain otherwise (a fake LUKS image's data, on
// the fake disk layer).
func readImage(t *testing.T, e *env, name string, pass []byte) error {
	t.Helper()
	img, err := e.Catalog().Image(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	p := e.dir + "/images/" + img.File
	if ok, err := fakeReadPattern(p, pass, nil); ok {
		return err
	}
	args := []string{"-r", "-U", "-f", "qcow2", p, "-c", "read -P " + imagePattern + " 0 64k"}
	var secrets [][]byte
	if pass != nil {
		args = []string{"--object", "secret,id=s0,file=/dev/fd/3", "-r", "-U", "--image-opts", "driver=qcow2,file.filename=" + p + ",encrypt.key-secret=s0", "-c", "read -P " + imagePattern + " 0 64k"}
		secrets = [][]byte{pass}
	}
	out, err := testenv.QemuIO(t, args, secrets...)
	if err != nil || strings.Contains(out, "Pattern verification failed") {
		return errors.New(out)
	}
	return nil
}

const snapSrcSpec = "name: src-1\nproject_id: p1\nimage: enc-img\ndisks: [{name: vda, tag: root, encrypted: true}]\n"

// TestSnapshotEncryptionKeys: a stopped instance's encrypted root disk
// (an overlay of an encrypted image) snapshots into the catalog
// flattened, as each --encryption-key choice says, with the os_encrypt_*
// and os_decrypt_* properties; an instance booted from an encrypted
// snapshot is encrypted and reads the data; deleting an image deletes
// its secret only when its policy says so.
//
// On the fake disk layer (fakedisk_test.go): TestLibvirtEncryptedImage
// takes the real qemu-img's path of a re-encrypting and a decrypting
// snapshot, reads their data and boots the re-encrypted one on the real
// libvirtd.
func TestSnapshotEncryptionKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	withFakeEncryption(t, e)
	ctx := context.Background()
	makeEncryptedImage(t, e, e.dp().Keys, "enc-img", "p1")
	inst := e.mustApply(snapSrcSpec)
	rootPass, _ := e.dp().Keys.Passphrase(ctx, inst.BlockDevices[0].EncryptionSecretUUID)
	user, err := e.dp().Keys.Create(ctx, keys.Request{Name: "mine", ProjectID: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := e.dp().Keys.Create(ctx, keys.Request{Name: "theirs", ProjectID: "p2"})

	snap := func(img, mode, secret string) map[string]string {
		t.Helper()
		got, err := e.c.Snapshot(ctx, "src-1", SnapshotRequest{Image: img, EncryptionKey: mode, SecretUUID: secret})
		if err != nil {
			t.Fatalf("snapshot %s: %v", mode, err)
		}
		return got.Properties
	}
	same := snap("snap-same", "", "")
	if same["os_encrypt_key_id"] == "" || same["os_encrypt_key_id"] == inst.BlockDevices[0].EncryptionSecretUUID ||
		same["os_encrypt_format"] != "luks" || same["os_encrypt_cipher"] != "aes-xts-plain64" || same["os_encrypt_key_deletion_policy"] != "on_image_deletion" ||
		same["os_decrypt_container_format"] != "bare" || same["os_decrypt_size"] != "33554432" {
		t.Fatalf("same: %v", same)
	}
	samePass, _ := e.dp().Keys.Passphrase(ctx, same["os_encrypt_key_id"])
	if string(samePass) != string(rootPass) {
		t.Error("same: the image's secret does not hold the root disk's passphrase")
	}
	if err := readImage(t, e, "snap-same", samePass); err != nil {
		t.Errorf("same: the flattened image does not read the data: %v", err)
	}
	nw := snap("snap-new", "new", "")
	newPass, _ := e.dp().Keys.Passphrase(ctx, nw["os_encrypt_key_id"])
	if string(newPass) == string(rootPass) || readImage(t, e, "snap-new", newPass) != nil || readImage(t, e, "snap-new", rootPass) == nil {
		t.Error("new: the image must open with a new passphrase only")
	}
	ex := snap("snap-existing", "existing", user.UUID)
	userPass, _ := e.dp().Keys.Passphrase(ctx, user.UUID)
	if ex["os_encrypt_key_id"] != user.UUID || ex["os_encrypt_key_deletion_policy"] != "do_not_delete" || readImage(t, e, "snap-existing", userPass) != nil {
		t.Errorf("existing: %v", ex)
	}
	if none := snap("snap-none", "none", ""); len(none) != 0 || readImage(t, e, "snap-none", nil) != nil {
		t.Errorf("none: %v", none)
	}

	// Refusals: 400 for bad input, 409 naming both projects, nothing made.
	before := e.snapshot()
	for _, tc := range []struct {
		req      SnapshotRequest
		conflict bool
		want     string
	}{
		{SnapshotRequest{Image: "x1", EncryptionKey: "maybe"}, false, "encryption_key"},
		{SnapshotRequest{Image: "x1", EncryptionKey: "existing"}, false, "secret_uuid"},
		{SnapshotRequest{Image: "x1", SecretUUID: user.UUID}, false, "secret_uuid"},
		{SnapshotRequest{Image: "../x"}, false, "name"},
		{SnapshotRequest{Image: "x1", EncryptionKey: "existing", SecretUUID: other.UUID}, true, `project "p2" and the instance to project "p1"`},
		{SnapshotRequest{Image: "x1", EncryptionKey: "existing", SecretUUID: keys.NewUUID()}, true, "no such secret"},
		{SnapshotRequest{Image: "snap-same"}, true, "snap-same"},
	} {
		_, err := e.c.Snapshot(ctx, "src-1", tc.req)
		var se *model.SpecError
		if err == nil || !errors.As(err, &se) && !tc.conflict || errors.Is(err, store.ErrConflict) != tc.conflict || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Snapshot(%+v) = %v, want %s naming %s", tc.req, err, map[bool]string{true: "409", false: "400"}[tc.conflict], tc.want)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("refused snapshots left changes:\n%s", diffLines(before, after))
	}
	// The administrator's snapshot may name another project's secret
	// (issue 20, item 4).
	if got, err := e.c.SnapshotAnyProject(ctx, "src-1", SnapshotRequest{Image: "snap-other", EncryptionKey: "existing", SecretUUID: other.UUID}); err != nil ||
		got.Properties["os_encrypt_key_id"] != other.UUID {
		t.Errorf("SnapshotAnyProject with project p2's secret = %v, %v", got.Properties, err)
	}
	if _, err := e.c.Start(ctx, "src-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Snapshot(ctx, "src-1", SnapshotRequest{Image: "x2"}); !errors.Is(err, ErrState) {
		t.Errorf("snapshot of a running instance = %v", err)
	}

	// An instance from an encrypted snapshot is encrypted by default.
	booted := e.mustApply("name: from-snap\nproject_id: p1\nimage: snap-new\ndisks: [{name: vda, tag: root}]\n")
	bd := booted.BlockDevices[0]
	if !bd.Encrypted || bd.BackingEncryptionSecretUUID == "" {
		t.Fatalf("from an encrypted snapshot: %+v", bd)
	}
	if err := e.Catalog().DeleteImage(ctx, "snap-new"); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "from-snap") {
		t.Errorf("delete of an image in use = %v", err)
	}
	if err := e.c.Delete(ctx, "from-snap"); err != nil {
		t.Fatal(err)
	}
	// Deletion policies.
	for _, img := range []string{"snap-new", "snap-existing"} {
		if err := e.Catalog().DeleteImage(ctx, img); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.dp().Keys.Get(ctx, nw["os_encrypt_key_id"]); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("on_image_deletion: the secret is still there: %v", err)
	}
	if _, err := e.dp().Keys.Get(ctx, user.UUID); err != nil {
		t.Errorf("do_not_delete: the user's secret went: %v", err)
	}
}

// TestFaultsSnapshot fails each key-manager and qemu-img step of a
// snapshot (same and new) in turn: nothing is left behind — no image, no
// secret, no temporary file. Each failure is a parallel subtest on the
// fake disk layer (fakedisk_test.go); TestLibvirtEncryptedImage takes
// the real qemu-img's path.
func TestFaultsSnapshot(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"same", "new"} {
		t.Run(mode, func(t *testing.T) {
			setup := func(t *testing.T) (*env, *faults) {
				e := newEnv(t)
				f := withFakeEncryption(t, e)
				makeEncryptedImage(t, e, e.dp().Keys, "enc-img", "p1")
				e.mustApply(snapSrcSpec)
				return e, f
			}
			op := func(e *env) error {
				_, err := e.c.Snapshot(context.Background(), "src-1", SnapshotRequest{Image: "snap", EncryptionKey: mode})
				return err
			}
			ref, rf := setup(t)
			start := len(rf.calls)
			if err := op(ref); err != nil {
				t.Fatal(err)
			}
			calls := rf.calls[start:]
			for k := range calls {
				faultStep(t, fmt.Sprintf("%d-%s", k+1, calls[k]), func(t *testing.T) {
					e, f := setup(t)
					before := e.snapshot()
					f.failAt = len(f.calls) + k + 1
					if err := op(e); !errors.Is(err, errInjected) {
						t.Errorf("failing %s (%d/%d): %v", calls[k], k+1, len(calls), err)
						return
					}
					if after := e.snapshot(); after != before {
						t.Errorf("failing %s (%d/%d) left changes:\n%s", calls[k], k+1, len(calls), diffLines(before, after))
					}
				})
			}
		})
	}
}
