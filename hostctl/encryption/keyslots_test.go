package encryption_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/internal/testenv"
)

// qemuIO runs qemu-io on the LUKS qcow2 at p unlocked with pass (fd 3).
func qemuIO(t *testing.T, p string, pass []byte, cmd string) (string, error) {
	t.Helper()
	c := exec.Command(testenv.LookPath(t, "qemu-io"), "--object", "secret,id=s0,file=/dev/fd/3", "--image-opts",
		"driver=qcow2,file.filename="+p+",encrypt.key-secret=s0", "-c", cmd)
	r, w, _ := os.Pipe()
	w.Write(pass)
	w.Close()
	defer r.Close()
	c.ExtraFiles = []*os.File{r}
	out, err := c.CombinedOutput()
	return string(out), err
}

// TestKeySlotRotation: on a real qemu-img LUKS qcow2, a passphrase added
// to a free slot opens the disk, the old one's slot erased (unlocking
// with the new) no longer does, a pattern written before reads back, and
// the refusals are the sentinel errors: an active slot, the last slot, a
// wrong unlocking passphrase. A retried erase is no error.
func TestKeySlotRotation(t *testing.T) {
	ctx := context.Background()
	tl := tool(t)
	p := filepath.Join(t.TempDir(), "disk.qcow2")
	oldPass, newPass := []byte("old-passphrase"), []byte("new-passphrase")
	if err := tl.Create(ctx, encryption.Disk{Path: p, Size: "8M"}, oldPass); err != nil {
		t.Fatal(err)
	}
	if out, err := qemuIO(t, p, oldPass, "write -P 0x5a 0 64k"); err != nil {
		t.Fatalf("write pattern: %v: %s", err, out)
	}
	slots, err := tl.KeySlots(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(slots) != encryption.MaxKeySlots || !slots[0] || slices.Contains(slots[1:], true) {
		t.Fatalf("slots of a new disk = %v, want only slot 0 active", slots)
	}
	free, err := encryption.FreeKeySlot(slots)
	if err != nil || free != 1 {
		t.Fatalf("FreeKeySlot = %d, %v", free, err)
	}
	if err := tl.AddKeySlot(ctx, p, 0, oldPass, newPass, nil); !errors.Is(err, encryption.ErrSlotActive) {
		t.Fatalf("add to active slot 0 = %v, want ErrSlotActive", err)
	}
	if err := tl.AddKeySlot(ctx, p, free, []byte("wrong"), newPass, nil); !errors.Is(err, encryption.ErrWrongPassphrase) {
		t.Fatalf("add unlocking with a wrong passphrase = %v, want ErrWrongPassphrase", err)
	}
	if err := tl.AddKeySlot(ctx, p, free, oldPass, newPass, nil); err != nil {
		t.Fatal(err)
	}
	for _, pass := range [][]byte{oldPass, newPass} {
		if err := tl.Verify(ctx, p, pass, nil); err != nil {
			t.Fatalf("after add, %q does not open: %v", pass, err)
		}
	}
	if slots, _ = tl.KeySlots(ctx, p); !slots[0] || !slots[1] {
		t.Fatalf("slots after add = %v", slots)
	}
	if err := tl.EraseKeySlot(ctx, p, 0, []byte("wrong"), nil); !errors.Is(err, encryption.ErrWrongPassphrase) {
		t.Fatalf("erase unlocking with a wrong passphrase = %v", err)
	}
	if err := tl.EraseKeySlot(ctx, p, 0, newPass, nil); err != nil {
		t.Fatal(err)
	}
	if err := tl.EraseKeySlot(ctx, p, 0, newPass, nil); err != nil {
		t.Fatalf("retried erase: %v", err)
	}
	if err := tl.Verify(ctx, p, oldPass, nil); !errors.Is(err, encryption.ErrWrongPassphrase) {
		t.Fatalf("old passphrase after erase: %v", err)
	}
	if err := tl.EraseKeySlot(ctx, p, 1, newPass, nil); !errors.Is(err, encryption.ErrLastSlot) {
		t.Fatalf("erase of the last slot = %v, want ErrLastSlot", err)
	}
	if out, err := qemuIO(t, p, newPass, "read -P 0x5a 0 64k"); err != nil || strings.Contains(out, "Pattern verification failed") {
		t.Fatalf("pattern after rotation: %v: %s", err, out)
	}
	for _, slot := range []int{-1, encryption.MaxKeySlots} {
		if err := tl.AddKeySlot(ctx, p, slot, newPass, oldPass, nil); err == nil || !strings.Contains(err.Error(), "must be 0 to 7") {
			t.Errorf("AddKeySlot(slot %d) = %v", slot, err)
		}
		if err := tl.EraseKeySlot(ctx, p, slot, newPass, nil); err == nil || !strings.Contains(err.Error(), "must be 0 to 7") {
			t.Errorf("EraseKeySlot(slot %d) = %v", slot, err)
		}
	}
}

// TestKeySlotsOverEncryptedBase: qemu-img amend opens the whole chain, so
// rotating an overlay over an encrypted image needs the backing file's
// passphrase too; the backing file's own slots are untouched.
func TestKeySlotsOverEncryptedBase(t *testing.T) {
	ctx := context.Background()
	tl := tool(t)
	dir := t.TempDir()
	base, ov := filepath.Join(dir, "base.qcow2"), filepath.Join(dir, "ov.qcow2")
	basePass, oldPass, newPass := []byte("base"), []byte("old"), []byte("new")
	if err := tl.Create(ctx, encryption.Disk{Path: base, Size: "8M"}, basePass); err != nil {
		t.Fatal(err)
	}
	if err := tl.Create(ctx, encryption.Disk{Path: ov, Base: &encryption.Base{Path: base, Format: "qcow2"}}, oldPass); err != nil {
		t.Fatal(err)
	}
	if err := tl.AddKeySlot(ctx, ov, 1, oldPass, newPass, nil); err == nil {
		t.Fatal("amend without the backing file's passphrase succeeded")
	}
	if err := tl.AddKeySlot(ctx, ov, 1, oldPass, newPass, basePass); err != nil {
		t.Fatal(err)
	}
	if err := tl.EraseKeySlot(ctx, ov, 0, newPass, basePass); err != nil {
		t.Fatal(err)
	}
	if err := tl.Verify(ctx, ov, newPass, basePass); err != nil {
		t.Fatal(err)
	}
	if err := tl.Verify(ctx, base, basePass, nil); err != nil {
		t.Fatalf("the backing file no longer opens with its passphrase: %v", err)
	}
	if s, _ := tl.KeySlots(ctx, base); !s[0] || slices.Contains(s[1:], true) {
		t.Fatalf("backing file slots changed: %v", s)
	}
}

// TestKeySlotsOfPlainImage: a plain qcow2 has no key slots.
func TestKeySlotsOfPlainImage(t *testing.T) {
	p := filepath.Join(t.TempDir(), "plain.qcow2")
	if out, err := exec.Command(testenv.LookPath(t, "qemu-img"), "create", "-q", "-f", "qcow2", p, "1M").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if _, err := tool(t).KeySlots(context.Background(), p); err == nil || !strings.Contains(err.Error(), "not encrypted") {
		t.Fatalf("KeySlots of a plain image = %v", err)
	}
}

func TestParseKeySlots(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []bool
		err      string
	}{
		{"qcow2", `{"format":"qcow2","format-specific":{"type":"qcow2","data":{"encrypt":{"format":"luks","slots":[{"active":true},{"active":false},{"active":true}]}}}}`, []bool{true, false, true}, ""},
		{"raw luks", `{"format":"luks","format-specific":{"type":"luks","data":{"slots":[{"active":false},{"active":true}]}}}`, []bool{false, true}, ""},
		{"plain", `{"format":"qcow2","format-specific":{"type":"qcow2","data":{}}}`, nil, "not encrypted"},
		{"raw", `{"format":"raw"}`, nil, "no LUKS key slots"},
		{"too many", `{"format-specific":{"type":"luks","data":{"slots":[{},{},{},{},{},{},{},{},{}]}}}`, nil, "9 key slots"},
		{"garbage", `{`, nil, "qemu-img info"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := encryption.ParseKeySlots([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("= %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	all := []bool{true, true, true, true, true, true, true, true}
	if _, err := encryption.FreeKeySlot(all); !errors.Is(err, encryption.ErrNoFreeSlot) {
		t.Fatalf("FreeKeySlot(all active) = %v", err)
	}
}

func FuzzParseKeySlots(f *testing.F) {
	f.Add([]byte(`{"format":"qcow2","format-specific":{"type":"qcow2","data":{"encrypt":{"format":"luks","slots":[{"active":true},{"active":false}]}}}}`))
	f.Add([]byte(`{"format":"luks","format-specific":{"type":"luks","data":{"slots":[{"active":true}]}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		slots, err := encryption.ParseKeySlots(b)
		if err == nil && (len(slots) == 0 || len(slots) > encryption.MaxKeySlots) {
			t.Fatalf("no error and %d slots", len(slots))
		}
		if err == nil {
			if i, ferr := encryption.FreeKeySlot(slots); ferr == nil && slots[i] {
				t.Fatalf("FreeKeySlot chose active slot %d", i)
			}
		}
	})
}

// TestKeySlotPassphrasesNeverOnCommandLine runs AddKeySlot and
// EraseKeySlot (over an encrypted backing file: three passphrases at
// once) through qemu-img/qemu-io wrappers that record their arguments and
// environment: no passphrase is there, nor in any file, nor in an error.
func TestKeySlotPassphrasesNeverOnCommandLine(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tl, log := recordingTool(t, dir)
	basePass, oldPass, newPass := []byte("base-secret-never-in-argv"), []byte("old-secret-never-in-argv"), []byte("new-secret-never-in-argv")
	base, ov := filepath.Join(dir, "base.qcow2"), filepath.Join(dir, "ov.qcow2")
	if err := tl.Create(ctx, encryption.Disk{Path: base, Size: "8M"}, basePass); err != nil {
		t.Fatal(err)
	}
	if err := tl.Create(ctx, encryption.Disk{Path: ov, Base: &encryption.Base{Path: base, Format: "qcow2"}}, oldPass); err != nil {
		t.Fatal(err)
	}
	if err := tl.AddKeySlot(ctx, ov, 2, oldPass, newPass, basePass); err != nil {
		t.Fatal(err)
	}
	if err := tl.EraseKeySlot(ctx, ov, 0, newPass, basePass); err != nil {
		t.Fatal(err)
	}
	// Failures carry qemu-img's message and arguments, never a passphrase.
	errs := []error{
		tl.AddKeySlot(ctx, ov, 2, newPass, oldPass, basePass),
		tl.AddKeySlot(ctx, ov, 3, oldPass, newPass, basePass),
		tl.EraseKeySlot(ctx, ov, 2, newPass, basePass),
	}
	for i, err := range errs {
		if err == nil {
			t.Fatalf("error case %d succeeded", i)
		}
		for _, p := range [][]byte{basePass, oldPass, newPass} {
			if strings.Contains(err.Error(), string(p)) {
				t.Fatalf("error case %d names a passphrase: %v", i, err)
			}
		}
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "encrypt.new-secret=secnew") || !strings.Contains(string(b), "file=/dev/fd/5") {
		t.Fatalf("wrapper did not run amend with three secrets:\n%s", b)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		c, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		for _, p := range [][]byte{basePass, oldPass, newPass} {
			if bytes.Contains(c, p) {
				t.Fatalf("a passphrase is in %s (a command line, the environment or a file)", e.Name())
			}
		}
	}
}
