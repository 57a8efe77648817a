package encryption_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/internal/testenv"
)

// TestRebase: a LUKS qcow2 overlay and a plain one, moved to a host whose
// base image sits elsewhere, point at the new base (the data and the
// passphrase unchanged: the encrypted one still opens).
func TestRebase(t *testing.T) {
	ctx := context.Background()
	tl := tool(t)
	dir := t.TempDir()
	oldBase, newBase := filepath.Join(dir, "old", "base.qcow2"), filepath.Join(dir, "new", "base.qcow2")
	for _, d := range []string{filepath.Dir(oldBase), filepath.Dir(newBase)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	testenv.QemuImg(t, "create", "-q", "-f", "qcow2", oldBase, "16M")
	testenv.QemuImg(t, "create", "-q", "-f", "qcow2", newBase, "16M")
	pass := []byte("moved-disk-passphrase")
	enc := filepath.Join(dir, "enc.qcow2")
	if err := tl.Create(ctx, encryption.Disk{Path: enc, Base: &encryption.Base{Path: oldBase, Format: "qcow2"}}, pass); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain.qcow2")
	testenv.QemuImg(t, "create", "-q", "-f", "qcow2", "-b", oldBase, "-F", "qcow2", plain)
	if err := tl.Rebase(ctx, enc, newBase, "qcow2", pass); err != nil {
		t.Fatal(err)
	}
	if err := tl.Rebase(ctx, plain, newBase, "qcow2", nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{enc, plain} {
		info, err := tl.Inspect(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if info.BackingFile != newBase {
			t.Errorf("%s: backing %q, want %q", p, info.BackingFile, newBase)
		}
	}
	if err := os.Remove(oldBase); err != nil {
		t.Fatal(err)
	}
	if err := tl.Verify(ctx, enc, pass, nil); err != nil {
		t.Fatalf("the rebased encrypted disk does not open: %v", err)
	}
	if err := tl.Rebase(ctx, enc, newBase, "qcow2", []byte("wrong")); err == nil {
		t.Fatal("rebase with a wrong passphrase succeeded")
	}
}
