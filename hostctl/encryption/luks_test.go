package encryption_test

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
	"github.com/vmeta/vmeta/internal/testenv"
)

func tool(t *testing.T) *encryption.Tool {
	return encryption.New(encryption.Options{QemuImg: testenv.LookPath(t, "qemu-img"), QemuIO: testenv.LookPath(t, "qemu-io"), IterTime: 50 * time.Millisecond})
}

// recordingTool is tool with qemu-img and qemu-io wrapped by scripts in
// dir that append their arguments, their environment and their
// /proc/PID/cmdline to the file log names before they run the real
// program.
func recordingTool(t *testing.T, dir string) (tl *encryption.Tool, log string) {
	t.Helper()
	log = filepath.Join(dir, "argv.log")
	wrap := func(name, real string) string {
		p := filepath.Join(dir, name)
		script := "#!/bin/sh\n{ printf '%s\\n' \"$0\" \"$@\"; env; cat /proc/$$/cmdline; } >> " + log + "\nexec " + real + " \"$@\"\n"
		if err := os.WriteFile(p, []byte(script), 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return encryption.New(encryption.Options{QemuImg: wrap("qemu-img", testenv.LookPath(t, "qemu-img")), QemuIO: wrap("qemu-io", testenv.LookPath(t, "qemu-io")), IterTime: 50 * time.Millisecond}), log
}

// TestCreateLUKS: a disk made by Create is a LUKS qcow2 as qemu-img info
// reads it, opens with its passphrase and not with another, and keeps no
// plaintext of what is written through it.
func TestCreateLUKS(t *testing.T) {
	ctx := context.Background()
	tl := tool(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "disk.qcow2")
	pass := []byte("0123456789abcdef0123456789abcdef")
	if err := tl.Create(ctx, encryption.Disk{Path: p, Size: "16M"}, pass); err != nil {
		t.Fatal(err)
	}
	info, err := tl.Inspect(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	want := encryption.Info{Format: "qcow2", Encrypted: true, EncryptFormat: "luks", Cipher: "aes-256", Mode: "xts", Hash: "sha256", IVGen: "plain64", KeyBits: 512, ActiveSlots: 1}
	if info != want {
		t.Fatalf("Inspect = %+v\nwant %+v", info, want)
	}
	if o := info.Options(); o["cipher"] != "aes-256" || o["key_size"] != "512" || o["ivgen"] != "plain64" {
		t.Fatalf("Options = %v", o)
	}
	if err := tl.Verify(ctx, p, pass, nil); err != nil {
		t.Fatal(err)
	}
	if err := tl.Verify(ctx, p, []byte("another disk's passphrase"), nil); !errors.Is(err, encryption.ErrWrongPassphrase) {
		t.Fatalf("Verify with another passphrase = %v", err)
	}
	// Write a pattern through QEMU's block layer; the file must not hold it.
	pattern := bytes.Repeat([]byte("VMETA-PLAINTEXT-"), 64)
	pf := filepath.Join(dir, "pattern")
	os.WriteFile(pf, pattern, 0o600)
	cmd := exec.Command(testenv.LookPath(t, "qemu-io"), "--object", "secret,id=s0,file=/dev/fd/3", "--image-opts",
		"driver=qcow2,file.filename="+p+",encrypt.key-secret=s0", "-c", "write -P 0x41 0 1M")
	r, w, _ := os.Pipe()
	w.Write(pass)
	w.Close()
	cmd.ExtraFiles = []*os.File{r}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("qemu-io write: %v: %s", err, out)
	}
	b, _ := os.ReadFile(p)
	if bytes.Contains(b, bytes.Repeat([]byte{0x41}, 4096)) {
		t.Fatal("the disk file holds the written pattern in plain")
	}

	plain := filepath.Join(dir, "plain.qcow2")
	if out, err := exec.Command(testenv.LookPath(t, "qemu-img"), "create", "-q", "-f", "qcow2", plain, "16M").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	pi, err := tl.Inspect(ctx, plain)
	if err != nil || pi.Encrypted || pi.EncryptFormat != "" || pi.Options() != nil {
		t.Fatalf("plain disk: %+v, %v", pi, err)
	}
}

// TestOverlayOverPlainBase: an encrypted overlay over a plain base; the
// base stays plain.
func TestOverlayOverPlainBase(t *testing.T) {
	ctx := context.Background()
	tl := tool(t)
	dir := t.TempDir()
	base := filepath.Join(dir, "base.raw")
	os.WriteFile(base, bytes.Repeat([]byte{7}, 1<<20), 0o600)
	p := filepath.Join(dir, "root.qcow2")
	pass := []byte("root-pass")
	if err := tl.Create(ctx, encryption.Disk{Path: p, Base: &encryption.Base{Path: base, Format: "raw"}}, pass); err != nil {
		t.Fatal(err)
	}
	info, err := tl.Inspect(ctx, p)
	if err != nil || !info.Encrypted || info.BackingFile != base {
		t.Fatalf("%+v %v", info, err)
	}
	bi, _ := tl.Inspect(ctx, base)
	if bi.Encrypted {
		t.Fatal("base encrypted")
	}
	if err := tl.Verify(ctx, p, pass, nil); err != nil {
		t.Fatal(err)
	}
}

// TestPassphraseNeverOnCommandLine runs Create and Verify through a
// qemu-img/qemu-io wrapper that records its arguments and environment.
func TestPassphraseNeverOnCommandLine(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tl, log := recordingTool(t, dir)
	pass := []byte("s3cr3t-passphrase-never-in-argv")
	p := filepath.Join(dir, "d.qcow2")
	if err := tl.Create(ctx, encryption.Disk{Path: p, Size: "8M"}, pass); err != nil {
		t.Fatal(err)
	}
	if err := tl.Verify(ctx, p, pass, nil); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "file=/dev/fd/3") {
		t.Fatalf("wrapper did not run:\n%s", b)
	}
	if bytes.Contains(b, pass) {
		t.Fatal("the passphrase was on a command line or in the environment")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if c, _ := os.ReadFile(filepath.Join(dir, e.Name())); bytes.Contains(c, pass) {
			t.Fatalf("the passphrase is in file %s", e.Name())
		}
	}
}

func TestCreateFailureReported(t *testing.T) {
	tl := tool(t)
	p := filepath.Join(t.TempDir(), "no", "such", "dir", "d.qcow2")
	err := tl.Create(context.Background(), encryption.Disk{Path: p, Size: "8M"}, []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "qemu-img") {
		t.Fatalf("Create = %v", err)
	}
}

func TestProbe(t *testing.T) {
	testenv.LookPath(t, "qemu-img")
	testenv.LookPath(t, "qemu-system-x86_64")
	testenv.LookPath(t, "cryptsetup")
	s := encryption.Probe(context.Background(), encryption.ProbeOptions{TempDir: t.TempDir()})
	if !s.Has(encryption.FormatLUKS) {
		t.Fatalf("luks not supported: %+v", s)
	}
	// QEMU 7.2 (Debian 12) cannot open LUKS2: the reason must say so
	// rather than the trait being claimed. A newer QEMU may.
	if !s.Has(encryption.FormatLUKSv2) && !strings.Contains(s.Why[encryption.FormatLUKSv2], "QEMU cannot open it") {
		t.Fatalf("luksv2 reason: %q", s.Why[encryption.FormatLUKSv2])
	}
	if s.Has(encryption.FormatPlain) {
		t.Fatal("plain offered")
	}
	tr := s.Traits()
	if tr[0] != encryption.TraitEphemeralEncryption || !strings.Contains(strings.Join(tr, ","), encryption.TraitLUKS) {
		t.Fatalf("traits %v", tr)
	}
	only := (encryption.Support{Formats: []string{"luks", "luksv2"}}).Only(encryption.Creatable...)
	if len(only.Formats) != 1 || only.Traits()[1] != encryption.TraitLUKS || !strings.Contains(only.Why["luksv2"], "does not create") {
		t.Fatalf("Only: %+v", only)
	}
	none := encryption.Probe(context.Background(), encryption.ProbeOptions{QemuImg: "/nonexistent/qemu-img", Cryptsetup: "/nonexistent/cryptsetup"})
	if len(none.Formats) != 0 || len(none.Traits()) != 0 || none.Why[encryption.FormatLUKS] == "" {
		t.Fatalf("without tools: %+v", none)
	}
}

func TestParseInfoTable(t *testing.T) {
	tests := []struct {
		name, in string
		want     encryption.Info
		err      bool
	}{
		{"raw luks", `{"format":"luks","encrypted":true,"format-specific":{"type":"luks","data":{"cipher-alg":"aes-128","cipher-mode":"cbc","hash-alg":"sha1","ivgen-alg":"essiv","ivgen-hash-alg":"sha256","slots":[{"active":true},{"active":true},{"active":false}]}}}`,
			encryption.Info{Format: "luks", Encrypted: true, EncryptFormat: "luks", Cipher: "aes-128", Mode: "cbc", Hash: "sha1", IVGen: "essiv", IVGenHash: "sha256", KeyBits: 128, ActiveSlots: 2}, false},
		{"plain qcow2", `{"format":"qcow2","format-specific":{"type":"qcow2","data":{"compat":"1.1"}}}`, encryption.Info{Format: "qcow2"}, false},
		{"raw", `{"format":"raw"}`, encryption.Info{Format: "raw"}, false},
		{"no format", `{}`, encryption.Info{}, true},
		{"garbage", `not json`, encryption.Info{}, true},
	}
	for _, tc := range tests {
		got, err := encryption.ParseInfo([]byte(tc.in))
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%s: ParseInfo = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

func FuzzParseInfo(f *testing.F) {
	f.Add([]byte(`{"format":"qcow2","encrypted":true,"format-specific":{"type":"qcow2","data":{"encrypt":{"format":"luks","cipher-alg":"aes-256","cipher-mode":"xts"}}}}`))
	f.Add([]byte(`{"format":"luks","format-specific":{"type":"luks","data":{}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := encryption.ParseInfo(b)
		if err == nil && info.Format == "" {
			t.Fatal("no error and no format")
		}
	})
}

// TestEncryptedBacking: an encrypted overlay of an encrypted image (the
// root disk of an instance from an encrypted image) is created without
// the image's passphrase (qemu-img create opens the backing file without
// I/O), yet opens, resizes and reads only with both: its own on fd 3 and
// the backing file's on fd 4; a wrong backing passphrase is
// ErrWrongPassphrase, a missing one an error.
func TestEncryptedBacking(t *testing.T) {
	ctx := context.Background()
	tl := tool(t)
	dir := t.TempDir()
	base, over := filepath.Join(dir, "base.qcow2"), filepath.Join(dir, "over.qcow2")
	basePass, pass := []byte("image passphrase"), []byte("the overlay's own passphrase")
	if err := tl.Create(ctx, encryption.Disk{Path: base, Size: "16M"}, basePass); err != nil {
		t.Fatal(err)
	}
	if err := tl.Create(ctx, encryption.Disk{Path: over, Base: &encryption.Base{Path: base, Format: "qcow2"}}, pass); err != nil {
		t.Fatal(err)
	}
	info, err := tl.Inspect(ctx, over)
	if err != nil || !info.Encrypted || info.BackingFile != base || info.BackingFormat != "qcow2" {
		t.Fatalf("Inspect = %+v %v", info, err)
	}
	if err := tl.Verify(ctx, over, pass, basePass); err != nil {
		t.Fatal(err)
	}
	if err := tl.Verify(ctx, over, pass, []byte("another image's passphrase")); !errors.Is(err, encryption.ErrWrongPassphrase) {
		t.Fatalf("Verify with a wrong backing passphrase = %v", err)
	}
	if err := tl.Verify(ctx, over, pass, nil); err == nil {
		t.Fatal("Verify without the backing passphrase succeeded")
	}
	if err := tl.Verify(ctx, over, basePass, basePass); !errors.Is(err, encryption.ErrWrongPassphrase) {
		t.Fatalf("Verify with the image's passphrase for the overlay = %v", err)
	}
	if err := tl.Resize(ctx, over, 32<<20, false, pass, nil); err == nil {
		t.Fatal("Resize without the backing passphrase succeeded")
	}
	if err := tl.Resize(ctx, over, 32<<20, false, pass, basePass); err != nil {
		t.Fatal(err)
	}
	if info, _ := tl.Inspect(ctx, over); info.BackingFile != base {
		t.Fatalf("after resize: %+v", info)
	}
}
