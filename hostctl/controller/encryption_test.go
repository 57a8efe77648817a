package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
	"github.com/vmeta/vmeta/internal/testenv"
)

// fakeSecret is a libvirt secret of the fake hypervisor.
type fakeSecret struct {
	virt.LibvirtSecret
	value []byte
}

func (f *fakeHV) DefineSecret(ctx context.Context, s virt.LibvirtSecret, value []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("DefineSecret"); err != nil {
		return err
	}
	for id, o := range f.secrets {
		if o.Usage == s.Usage && id != s.UUID {
			return fmt.Errorf("a secret with UUID %s already defined for use with %s", id, s.Usage)
		}
	}
	if f.secrets == nil {
		f.secrets = map[string]fakeSecret{}
	}
	f.secrets[s.UUID] = fakeSecret{s, bytes.Clone(value)}
	return nil
}

func (f *fakeHV) UndefineSecret(ctx context.Context, uuid string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("UndefineSecret"); err != nil {
		return err
	}
	delete(f.secrets, uuid)
	return nil
}

func (f *fakeHV) Secrets(ctx context.Context, prefix string) ([]virt.LibvirtSecret, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Secrets"); err != nil {
		return nil, err
	}
	var out []virt.LibvirtSecret
	for _, s := range f.secrets {
		if strings.HasPrefix(s.Usage, prefix) {
			out = append(out, s.LibvirtSecret)
		}
	}
	return out, nil
}

func (f *fakeHV) secretValue(uuid string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.secrets[uuid]
	return s.value, ok
}

// faults fails the n-th call (1-based) of the key manager and the LUKS
// tool together, once.
type faults struct {
	mu     sync.Mutex
	calls  []string
	failAt int
}

func (f *faults) call(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, op)
	if f.failAt == len(f.calls) {
		return fmt.Errorf("%s: %w", op, errInjected)
	}
	return nil
}

type faultyKeys struct {
	KeyManager
	f *faults
}

func (k faultyKeys) Create(ctx context.Context, req keys.Request) (keys.Secret, error) {
	if err := k.f.call("keys.Create"); err != nil {
		return keys.Secret{}, err
	}
	return k.KeyManager.Create(ctx, req)
}

func (k faultyKeys) Passphrase(ctx context.Context, id string) ([]byte, error) {
	if err := k.f.call("keys.Passphrase"); err != nil {
		return nil, err
	}
	return k.KeyManager.Passphrase(ctx, id)
}

type faultyLUKS struct {
	LUKS
	f *faults
}

func (l faultyLUKS) Create(ctx context.Context, d encryption.Disk, pass []byte) error {
	if err := l.f.call("luks.Create"); err != nil {
		// As qemu-img may: a partial file is left.
		os.WriteFile(d.Path, []byte("partial"), 0o600)
		return err
	}
	return l.LUKS.Create(ctx, d, pass)
}

func (l faultyLUKS) Inspect(ctx context.Context, path string) (encryption.Info, error) {
	if err := l.f.call("luks.Inspect"); err != nil {
		return encryption.Info{}, err
	}
	return l.LUKS.Inspect(ctx, path)
}

func (l faultyLUKS) Resize(ctx context.Context, path string, size int64, shrink bool, pass, backing []byte) error {
	if err := l.f.call("luks.Resize"); err != nil {
		return err
	}
	return l.LUKS.Resize(ctx, path, size, shrink, pass, backing)
}

func (l faultyLUKS) Convert(ctx context.Context, dst string, src encryption.Source, pass []byte) error {
	if err := l.f.call("luks.Convert"); err != nil {
		os.WriteFile(dst, []byte("partial"), 0o600)
		return err
	}
	return l.LUKS.Convert(ctx, dst, src, pass)
}

func (l faultyLUKS) Verify(ctx context.Context, path string, pass, backing []byte) error {
	if err := l.f.call("luks.Verify"); err != nil {
		return err
	}
	return l.LUKS.Verify(ctx, path, pass, backing)
}

// withFakeEncryption is withEncryption on the fake disk layer
// (fakedisk_test.go).
func withFakeEncryption(t *testing.T, e *env) *faults {
	f := withEncryption(t, e)
	withFakeDisks(t, e, f)
	return f
}

// withEncryption gives e's controller a key manager (on e's store, key
// file in e's data directory), the real qemu-img/qemu-io with a short
// PBKDF time, and the fake's libvirt secrets; the key manager and the
// LUKS tool fail at the n-th of their calls when f.failAt says so.
func withEncryption(t *testing.T, e *env) *faults {
	t.Helper()
	km, err := keys.Open(context.Background(), e.st, e.dir, keys.Options{Host: "local"})
	if err != nil {
		t.Fatal(err)
	}
	f := &faults{}
	e.dp().Keys = faultyKeys{km, f}
	e.dp().LUKS = faultyLUKS{encryption.New(encryption.Options{QemuImg: e.qemuImg, QemuIO: testenv.LookPath(t, "qemu-io"), IterTime: 10 * time.Millisecond}), f}
	e.dp().Secrets = e.hv
	return f
}

const encSpec = `
name: app-1
project_id: p1
addresses: [10.1.0.7]
disks:
  - {name: vda, size: 16M, tag: root, encrypted: true}
  - {name: vdb, size: 8M, tag: data}
  - {name: vdc, size: 8M, encrypted: true}
nics:
  - {mac: "52:54:00:00:00:01", tag: front}
`

// TestEncryptedApply: each disk requested encrypted is a LUKS qcow2 with
// its own secret; the guest is told encrypted exactly for those; the
// domain XML names the secrets; start hands them to libvirt and stop
// takes them back; delete removes the key-manager secrets.
//
// On the fake disk layer (fakedisk_test.go): TestLibvirtShelveUnshelve
// takes the same path (two LUKS disks and a plain one, start, stop,
// delete) through the real qemu-img, LUKS and libvirtd.
func TestEncryptedApply(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	withFakeEncryption(t, e)
	ctx := context.Background()
	inst := e.mustApply(encSpec)

	bds := map[string]string{}
	for _, bd := range inst.BlockDevices {
		if bd.Encrypted {
			if bd.EncryptionFormat != "luks" || bd.EncryptionOptions["cipher"] != "aes-256" || bd.EncryptionOptions["key_size"] != "512" || bd.BackingEncryptionSecretUUID != "" {
				t.Errorf("block device %+v", bd)
			}
			bds[bd.Disk] = bd.EncryptionSecretUUID
		}
	}
	if len(bds) != 2 || bds["vda"] == "" || bds["vdc"] == "" || bds["vda"] == bds["vdc"] {
		t.Fatalf("encrypted block devices %v (want vda and vdc, each its own secret)", bds)
	}
	enc := map[string]bool{}
	for _, d := range devicesOf(t, e.st, inst.Spec.UUID) {
		if d.Type == "disk" && d.Encrypted != nil && *d.Encrypted {
			enc[d.Serial+d.Address] = true
		}
	}
	if len(enc) != 2 {
		t.Errorf("guest told %d disks encrypted, want 2 (vdc untagged included)", len(enc))
	}
	// Each disk opens with its own passphrase and not with the other's.
	tool := e.dp().LUKS
	passA, _ := e.dp().Keys.Passphrase(ctx, bds["vda"])
	passC, _ := e.dp().Keys.Passphrase(ctx, bds["vdc"])
	dir := filepath.Join(e.dir, "instances", "app-1")
	if err := tool.Verify(ctx, filepath.Join(dir, "disk-vda.qcow2"), passA, nil); err != nil {
		t.Error(err)
	}
	if err := tool.Verify(ctx, filepath.Join(dir, "disk-vda.qcow2"), passC, nil); !errors.Is(err, encryption.ErrWrongPassphrase) {
		t.Errorf("vda opened with vdc's passphrase: %v", err)
	}
	if info, _ := tool.Inspect(ctx, filepath.Join(dir, "disk-vdb.qcow2")); info.Encrypted {
		t.Error("vdb encrypted")
	}
	xml := e.hv.domains["app-1"].xml
	for _, id := range bds {
		if !strings.Contains(xml, `<secret type="passphrase" uuid="`+id+`">`) {
			t.Errorf("domain XML lacks secret %s:\n%s", id, xml)
		}
	}
	if len(e.hv.secrets) != 0 {
		t.Fatalf("libvirt secrets before start: %v", e.hv.secrets)
	}
	if _, err := e.c.Start(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if v, ok := e.hv.secretValue(bds["vda"]); !ok || !bytes.Equal(v, passA) {
		t.Fatal("libvirt secret of vda not set to its passphrase")
	}
	if _, err := e.c.Stop(ctx, "app-1", 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if len(e.hv.secrets) != 0 {
		t.Fatalf("libvirt secrets after stop: %d", len(e.hv.secrets))
	}
	// Re-applying the same spec keeps the disks and their secrets.
	again := e.mustApply(encSpec)
	if fmt.Sprint(again.BlockDevices) != fmt.Sprint(inst.BlockDevices) {
		t.Errorf("re-apply changed the block devices:\n%v\n%v", inst.BlockDevices, again.BlockDevices)
	}
	// Dropping vdc removes its secret after the commit.
	dropped := e.mustApply(strings.Replace(encSpec, "  - {name: vdc, size: 8M, encrypted: true}\n", "", 1))
	if len(dropped.BlockDevices) != 2 {
		t.Errorf("block devices after dropping vdc: %+v", dropped.BlockDevices)
	}
	if _, err := e.dp().Keys.Get(ctx, bds["vdc"]); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("vdc's secret after the disk went: %v", err)
	}
	if _, err := e.c.Start(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if l, _ := e.dp().Keys.List(ctx, ""); len(l) != 0 {
		t.Errorf("secrets after delete: %+v", l)
	}
	if recs, _ := e.st.Records(ctx, "blockdev/"); len(recs) != 0 {
		t.Errorf("block-device records after delete: %+v", recs)
	}
	if len(e.hv.secrets) != 0 {
		t.Errorf("libvirt secrets after delete: %d", len(e.hv.secrets))
	}
}

// TestEncryptionRefusals: requests this host cannot honour change nothing.
func TestEncryptionRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("no key manager", func(t *testing.T) {
		e := newEnv(t)
		before := e.snapshot()
		_, err := e.apply(encSpec)
		if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "disks[0].encrypted") || !strings.Contains(err.Error(), "no key manager") {
			t.Fatalf("apply = %v", err)
		}
		if after := e.snapshot(); after != before {
			t.Errorf("changed:\n%s", diffLines(before, after))
		}
	})
	t.Run("format", func(t *testing.T) {
		for _, format := range []string{"luksv2", "plain", "bogus"} {
			e := newEnv(t)
			withFakeEncryption(t, e) // refused before any LUKS work
			before := e.snapshot()
			in, err := model.ParseSpec([]byte(encSpec))
			if err != nil {
				t.Fatal(err)
			}
			in.Disks[2].EncryptionFormat = format
			_, err = e.c.ApplyInstance(ctx, in)
			// The policy (flavors.go) or the core's check refuses it,
			// naming the disk and the format.
			if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "disks[2]") || !strings.Contains(err.Error(), format) {
				t.Fatalf("%s: apply = %v", format, err)
			}
			if after := e.snapshot(); after != before {
				t.Errorf("%s changed:\n%s", format, diffLines(before, after))
			}
		}
	})
	t.Run("unsupported by the probe", func(t *testing.T) {
		e := newEnv(t)
		withFakeEncryption(t, e) // refused before any LUKS work
		e.dp().Support = func(context.Context) (encryption.Support, error) {
			return encryption.Support{Why: map[string]string{"luks": "qemu-img lacks it"}}, nil
		}
		_, err := e.apply(encSpec)
		if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "qemu-img lacks it") {
			t.Fatalf("apply = %v", err)
		}
	})
	t.Run("existing disk changes encryption", func(t *testing.T) {
		e := newEnv(t)
		withFakeEncryption(t, e) // refused before any LUKS work
		e.mustApply(encSpec)
		before := e.snapshot()
		_, err := e.apply(strings.Replace(encSpec, "{name: vdb, size: 8M, tag: data}", "{name: vdb, size: 8M, tag: data, encrypted: true}", 1))
		if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "disks[1].encrypted") {
			t.Fatalf("apply = %v", err)
		}
		if after := e.snapshot(); after != before {
			t.Errorf("changed:\n%s", diffLines(before, after))
		}
	})
}

// TestNoHypervisorNeverClaimsEncryption: without a hypervisor a spec's
// request is published as not encrypted, with a warning.
func TestNoHypervisorNeverClaimsEncryption(t *testing.T) {
	dir := t.TempDir()
	st := openBolt(t, dir)
	c := newController(st, Options{DataDir: dir})
	withDiskPart(c, "")
	inst, err := c.Apply(context.Background(), []byte(encSpec))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devicesOf(t, st, inst.Spec.UUID) {
		if d.Encrypted != nil && *d.Encrypted {
			t.Errorf("device %+v published encrypted", d)
		}
	}
	if len(inst.Warnings) != 2 || !strings.Contains(inst.Warnings[0], `"encrypted": false`) {
		t.Errorf("warnings %q", inst.Warnings)
	}
	got, err := c.Get(context.Background(), "app-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range got.Devices {
		if d.Encrypted != nil && *d.Encrypted {
			t.Errorf("instance show: device %+v encrypted", d)
		}
	}
}

// encFaults injects a failure at every key-manager and LUKS step of op
// (counted in a reference run) and checks that nothing is left behind:
// no partial file, no key-manager secret, no libvirt secret, no record.
// Each failure is a parallel subtest with its own env (on the fake disk
// layer, fakedisk_test.go).
func encFaults(t *testing.T, setup func(e *env), op func(e *env) error) {
	t.Helper()
	ref := newEnv(t)
	rf := withFakeEncryption(t, ref)
	setup(ref)
	start := len(rf.calls)
	if err := op(ref); err != nil {
		t.Fatalf("reference run: %v", err)
	}
	n := len(rf.calls) - start
	if n == 0 {
		t.Fatal("no key-manager or LUKS call")
	}
	for k := 1; k <= n; k++ {
		call := rf.calls[start+k-1]
		faultStep(t, fmt.Sprintf("%d-%s", k, call), func(t *testing.T) {
			e := newEnv(t)
			f := withFakeEncryption(t, e)
			setup(e)
			before := e.snapshot()
			f.failAt = len(f.calls) + k
			err := op(e)
			if !errors.Is(err, errInjected) {
				t.Errorf("failing %s (%d/%d): %v", call, k, n, err)
				return
			}
			if after := e.snapshot(); after != before {
				t.Errorf("failing %s (%d/%d) left changes behind:\n%s", call, k, n, diffLines(before, after))
			}
		})
	}
}

// hvFaults fails each hypervisor call of op in turn (op need not write
// the store, unlike faultMatrix's) and checks that a failed op leaves
// nothing behind; each failure is a parallel subtest with its own env.
func hvFaults(t *testing.T, setup func(e *env), op func(e *env) error, succeeded func(t *testing.T, e *env)) {
	t.Helper()
	ref := newEnv(t)
	setup(ref)
	start := ref.hv.callCount()
	if err := op(ref); err != nil {
		t.Fatalf("reference run: %v", err)
	}
	n := ref.hv.callCount() - start
	for k := 1; k <= n; k++ {
		call := ref.hv.calls[start+k-1]
		faultStep(t, fmt.Sprintf("%d-%s", k, call), func(t *testing.T) {
			e := newEnv(t)
			setup(e)
			before := e.snapshot()
			e.hv.setFailAt(e.hv.callCount() + k)
			err := op(e)
			if err == nil {
				t.Logf("failing %s (%d/%d): succeeded regardless", call, k, n)
				if succeeded != nil {
					succeeded(t, e)
				}
				return
			}
			if after := e.snapshot(); after != before {
				t.Errorf("failing %s (%d/%d: %v) left changes behind:\n%s", call, k, n, err, diffLines(before, after))
			}
		})
	}
}

func TestFaultsEncryptedApply(t *testing.T) {
	t.Parallel()
	apply := func(e *env) error { _, err := e.apply(encSpec); return err }
	t.Run("keys and qemu-img", func(t *testing.T) { encFaults(t, func(*env) {}, apply) })
	t.Run("libvirt and store", func(t *testing.T) {
		faultMatrix(t, func(e *env) { withFakeEncryption(e.t, e) }, apply)
	})
}

func TestFaultsEncryptedStart(t *testing.T) {
	t.Parallel()
	setup := func(e *env) {
		withFakeEncryption(e.t, e)
		e.mustApply(encSpec)
	}
	start := func(e *env) error { _, err := e.c.Start(context.Background(), "app-1"); return err }
	t.Run("libvirt", func(t *testing.T) { hvFaults(t, setup, start, nil) })
	t.Run("keys", func(t *testing.T) { encFaults(t, func(e *env) { e.mustApply(encSpec) }, start) })
}

// TestFaultsEncryptedDelete: a failure before the store delete undoes
// everything; one after it (undefining the libvirt secrets) lets the
// delete succeed, and the reconciler's next pass removes what is left.
func TestFaultsEncryptedDelete(t *testing.T) {
	t.Parallel()
	setup := func(e *env) {
		withFakeEncryption(e.t, e)
		e.mustApply(encSpec)
		if _, err := e.c.Start(context.Background(), "app-1"); err != nil {
			e.t.Fatal(err)
		}
	}
	hvFaults(t, setup, func(e *env) error { return e.c.Delete(context.Background(), "app-1") }, func(t *testing.T, e *env) {
		if err := e.c.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(e.hv.secrets) != 0 {
			t.Errorf("libvirt secrets after delete and a reconcile: %v", e.hv.secrets)
		}
		if l, _ := e.dp().Keys.List(context.Background(), ""); len(l) != 0 {
			t.Errorf("key-manager secrets after delete and a reconcile: %v", l)
		}
	})
	e := newEnv(t)
	setup(e)
	before := e.snapshot()
	e.st.failDelete = true
	if err := e.c.Delete(context.Background(), "app-1"); err == nil {
		t.Fatal("delete succeeded")
	}
	if after := e.snapshot(); after != before {
		t.Errorf("failed store delete left changes:\n%s", diffLines(before, after))
	}
}

// TestSweepSecrets: the reconciler removes libvirt secrets of domains that
// do not run and of instances that are gone, and key-manager secrets and
// records whose instance is gone (a crash between delete's steps).
func TestSweepSecrets(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	withFakeEncryption(t, e) // the sweep's logic: no LUKS work
	ctx := context.Background()
	inst := e.mustApply(encSpec)
	if _, err := e.c.Start(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	// A crash after the instance's record went, before its secrets did:
	// the store forgets the instance behind the controller's back.
	stray := virt.LibvirtSecret{UUID: keys.NewUUID(), Usage: e.c.secretPrefix() + keys.NewUUID() + "/vdb"}
	e.hv.DefineSecret(ctx, stray, []byte("x"))
	other := virt.LibvirtSecret{UUID: keys.NewUUID(), Usage: "vmeta/another-key/" + keys.NewUUID() + "/vdb"}
	e.hv.DefineSecret(ctx, other, []byte("x"))
	if err := e.c.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.hv.secretValue(stray.UUID); ok {
		t.Error("stray libvirt secret kept")
	}
	if _, ok := e.hv.secretValue(other.UUID); !ok {
		t.Error("another key manager's libvirt secret removed")
	}
	for _, bd := range inst.BlockDevices {
		if _, ok := e.hv.secretValue(bd.EncryptionSecretUUID); bd.Encrypted && !ok {
			t.Errorf("secret of running instance's disk %s removed", bd.Disk)
		}
	}
	// The domain goes off by itself: its secrets go at the next pass.
	e.hv.Destroy(ctx, "app-1")
	if err := e.c.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.hv.secretValue(other.UUID); !ok || len(e.hv.secrets) != 1 {
		t.Errorf("libvirt secrets after the domain stopped: %v", e.hv.secrets)
	}
	// The store loses the instance (crash in delete after the store
	// delete): secrets and records are swept.
	if err := e.st.Store.Delete(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if l, _ := e.dp().Keys.List(ctx, ""); len(l) != 0 {
		t.Errorf("secrets of a gone instance kept: %+v", l)
	}
	if recs, _ := e.st.Records(ctx, "blockdev/"); len(recs) != 0 {
		t.Errorf("records of a gone instance kept: %+v", recs)
	}
}

func openBolt(t *testing.T, dir string) store.Store {
	t.Helper()
	st, err := bolt.Open(filepath.Join(dir, "vmeta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestEncryptedRootOverPlainImage: a root disk requested encrypted over
// a plain base image is an encrypted overlay; the base image (the backing
// file) stays plain, and the record names no backing secret.
//
// On the fake disk layer (fakedisk_test.go): TestFlavorEncryptionEndToEnd
// makes an encrypted root disk over a plain image with the real qemu-img
// and LUKS.
func TestEncryptedRootOverPlainImage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	withFakeEncryption(t, e)
	ctx := context.Background()
	images := filepath.Join(e.dir, "images")
	if err := os.MkdirAll(images, 0o755); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(images, "debian.qcow2")
	if out, err := execCommand(e.qemuImg, "create", "-q", "-f", "qcow2", base, "32M"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	inst := e.mustApply("name: img-1\nimage: debian\ndisks: [{name: vda, tag: root, encrypted: true}, {name: vdb, size: 4M, encrypted: true}]\n")
	tool := e.dp().LUKS
	root, err := tool.Inspect(ctx, filepath.Join(e.dir, "instances", "img-1", "disk-vda.qcow2"))
	if err != nil || !root.Encrypted || root.BackingFile != base {
		t.Fatalf("root: %+v %v", root, err)
	}
	for _, p := range []string{base, filepath.Join(e.dir, "instances", "img-1", "disk-vdb.qcow2")} {
		info, err := tool.Inspect(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if p == base && info.Encrypted {
			t.Error("the base image got encrypted")
		}
		if p != base && (!info.Encrypted || info.BackingFile != "") {
			t.Errorf("blank disk: %+v (want encrypted, no backing file)", info)
		}
	}
	for _, bd := range inst.BlockDevices {
		if !bd.Encrypted || bd.BackingEncryptionSecretUUID != "" {
			t.Errorf("block device %+v", bd)
		}
	}
}

// TestAttachEncryptedDisk: a disk hot-plugged encrypted into a running
// domain gets its own secret, libvirt the passphrase before the attach,
// and the guest is told encrypted; detaching it deletes the secret.
//
// The real qemu-img and LUKS path of an encrypted hot-plug (its fault
// matrix, TestFaultsAttachEncryptedDisk, runs on the fake disk layer).
func TestAttachEncryptedDisk(t *testing.T) {
	t.Parallel() // the real qemu-img's LUKS work (seconds of CPU per disk): overlap it
	e := newEnv(t)
	withEncryption(t, e)
	ctx := context.Background()
	e.mustApply(hvSpec)
	if _, err := e.c.Start(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	inst, err := e.c.AttachDisk(ctx, "app-1", types.DiskRequest{Tag: "vault", Size: "8M", Encrypted: boolp(true)})
	if err != nil {
		t.Fatal(err)
	}
	var id, target string
	for _, bd := range inst.BlockDevices {
		if bd.Encrypted {
			id, target = bd.EncryptionSecretUUID, bd.Disk
		}
	}
	if id == "" {
		t.Fatalf("no encrypted block device: %+v", inst.BlockDevices)
	}
	if _, ok := e.hv.secretValue(id); !ok {
		t.Error("libvirt has no passphrase for the disk attached to the running domain")
	}
	found := false
	for _, d := range devicesOf(t, e.st, inst.Spec.UUID) {
		found = found || (len(d.Tags) == 1 && d.Tags[0] == "vault" && d.Encrypted != nil && *d.Encrypted)
	}
	if !found {
		t.Error("the attached disk is not published encrypted")
	}
	if _, err := e.c.DetachDisk(ctx, "app-1", types.DetachRequest{Target: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.dp().Keys.Get(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("secret after detach: %v", err)
	}
}

func TestFaultsAttachEncryptedDisk(t *testing.T) {
	t.Parallel()
	setup := func(e *env) {
		withFakeEncryption(e.t, e)
		e.mustApply(hvSpec)
		if _, err := e.c.Start(context.Background(), "app-1"); err != nil {
			e.t.Fatal(err)
		}
	}
	attach := func(e *env) error {
		_, err := e.c.AttachDisk(context.Background(), "app-1", types.DiskRequest{Tag: "vault", Size: "8M", Encrypted: boolp(true)})
		return err
	}
	faultMatrix(t, setup, attach)
	encFaults(t, func(e *env) {
		e.mustApply(hvSpec)
		if _, err := e.c.Start(context.Background(), "app-1"); err != nil {
			e.t.Fatal(err)
		}
	}, attach)
}

// TestReplacedDiskSecret: a disk made anew over an earlier record (as a
// rebuild remakes the root disk) gets a new secret and the old one goes;
// a secret of an existing instance that no record uses is swept.
func TestReplacedDiskSecret(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	withFakeEncryption(t, e)
	ctx := context.Background()
	inst := e.mustApply(encSpec)
	old := map[string]string{}
	for _, bd := range inst.BlockDevices {
		old[bd.Disk] = bd.EncryptionSecretUUID
	}
	if err := os.Remove(filepath.Join(e.dir, "instances", "app-1", "disk-vdc.qcow2")); err != nil {
		t.Fatal(err)
	}
	again := e.mustApply(encSpec)
	for _, bd := range again.BlockDevices {
		if bd.Disk == "vdc" && (bd.EncryptionSecretUUID == old["vdc"] || !bd.Encrypted) {
			t.Errorf("vdc made anew: %+v", bd)
		}
		if bd.Disk == "vda" && bd.EncryptionSecretUUID != old["vda"] {
			t.Errorf("vda's secret changed: %+v", bd)
		}
	}
	if _, err := e.dp().Keys.Get(ctx, old["vdc"]); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the replaced disk's secret: %v", err)
	}
	stray, err := e.dp().Keys.Create(ctx, keys.Request{ProjectID: "p1", Owner: &keys.Owner{Host: e.c.hostName, InstanceUUID: again.Spec.UUID, InstanceName: "app-1", Disk: "vdz"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.c.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.dp().Keys.Get(ctx, stray.UUID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unused secret of an existing instance not swept: %v", err)
	}
	if l, _ := e.dp().Keys.List(ctx, ""); len(l) != 2 {
		t.Errorf("secrets after the sweep: %d, want the two disks'", len(l))
	}
}

// TestFlavorEncryptionEndToEnd: a flavor asking for ephemeral encryption
// (the policy) gets every flavor disk created LUKS with its own secret
// (the core), the guest told so; a resize to a bigger encrypted flavor
// grows the LUKS root disk through its passphrase and makes the swap disk
// anew with a new secret (the old one deleted).
//
// The real qemu-img and LUKS path of flavor encryption, of an encrypted
// root disk over a plain image and of a LUKS resize.
func TestFlavorEncryptionEndToEnd(t *testing.T) {
	t.Parallel() // the real qemu-img's LUKS work (seconds of CPU per disk): overlap it
	e := newEnv(t)
	flavorSetup(e)
	withEncryption(t, e)
	ctx := context.Background()
	for _, f := range []flavors.Flavor{
		{Name: "f.encs", VCPUs: 1, RAM: 128, Disk: 1, Swap: 16, ExtraSpecs: map[string]string{"hw:ephemeral_encryption": "true"}},
		{Name: "f.encb", VCPUs: 2, RAM: 256, Disk: 2, Swap: 32, ExtraSpecs: map[string]string{"hw:ephemeral_encryption": "true"}},
	} {
		if _, err := e.Catalog().CreateFlavor(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	// The flavor's disks only (root and swap): each LUKS disk the real
	// qemu-img makes costs seconds of CPU; a spec's own disk following the
	// flavor's policy is TestAttachedDiskFollowsPolicy's.
	spec := strings.Replace(flavorSpec, "flavor: f.small", "flavor: f.encs", 1)
	spec = strings.Replace(spec, ", {name: sda, bus: scsi, size: 8M, tag: db}", "", 1)
	inst := e.mustApply(spec)
	secrets := map[string]string{}
	for _, bd := range inst.BlockDevices {
		if !bd.Encrypted || bd.EncryptionFormat != "luks" {
			t.Errorf("block device %+v not encrypted", bd)
		}
		secrets[bd.Disk] = bd.EncryptionSecretUUID
	}
	if len(secrets) != len(inst.Spec.Disks) {
		t.Fatalf("block devices %+v for disks %+v", inst.BlockDevices, inst.Spec.Disks)
	}
	for _, d := range devicesOf(t, e.st, inst.Spec.UUID) {
		if d.Type == "disk" && (d.Encrypted == nil || !*d.Encrypted) {
			t.Errorf("device %+v not published encrypted", d)
		}
	}
	resized, err := e.c.Resize(ctx, "app-1", "f.encb")
	if err != nil {
		t.Fatal(err)
	}
	tool := encryption.New(encryption.Options{QemuImg: e.qemuImg, QemuIO: testenv.LookPath(t, "qemu-io")})
	for _, d := range resized.Spec.Disks {
		if d.Kind != model.DiskKindRoot {
			continue
		}
		p := filepath.Join(e.dir, "instances", "app-1", diskFileOf(d))
		out, err := execCommand(e.qemuImg, "info", "--output=json", "-U", p)
		if err != nil || !strings.Contains(string(out), `"virtual-size": 2147483648`) {
			t.Errorf("root disk after resize: %v\n%s", err, out)
		}
		pass, _ := e.dp().Keys.Passphrase(ctx, secrets[d.Name])
		if err := tool.Verify(ctx, p, pass, nil); err != nil {
			t.Errorf("root disk after resize: %v", err)
		}
	}
	for _, bd := range resized.BlockDevices {
		if !bd.Encrypted {
			t.Errorf("after resize: %+v", bd)
		}
		if old := secrets[bd.Disk]; bd.Disk == swapDiskName(resized.Spec) && old == bd.EncryptionSecretUUID {
			t.Errorf("swap disk made anew kept its secret")
		}
	}
	if l, _ := e.dp().Keys.List(ctx, ""); len(l) != len(resized.Spec.Disks) {
		t.Errorf("%d secrets after resize, want one per disk (%d)", len(l), len(resized.Spec.Disks))
	}
}

func swapDiskName(in *model.Instance) string {
	for _, d := range in.Disks {
		if d.Kind == model.DiskKindSwap {
			return d.Name
		}
	}
	return ""
}
