package controller

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/internal/testenv"
)

// qemuImgEncrypted is what the real `qemu-img info` says of p's
// encryption.
func qemuImgEncrypted(t *testing.T, p string) bool {
	t.Helper()
	out, err := exec.Command(testenv.LookPath(t, "qemu-img"), "info", "--output=json", "-U", p).Output()
	if err != nil {
		t.Fatalf("qemu-img info %s: %v", p, err)
	}
	return strings.Contains(string(out), `"encrypted": true`)
}

func domainGone(uri, name string) bool {
	_, err := execCommand("virsh", "-q", "-c", uri, "dominfo", name)
	return err != nil
}

// TestLibvirtShelveUnshelve: against the real libvirtd, QEMU and
// qemu-img: a domain with two LUKS disks starts only because hostctl
// hands libvirt each disk's passphrase (QEMU unlocks the disks at start);
// stop takes the libvirt secrets back. The stopped instance is shelved —
// no domain, no disk file, no libvirt secret, the key-manager secrets
// kept, a reconcile changes nothing — and unshelved: the root disk opens
// with the same secret UUID and passphrase and reads the pattern written
// before the shelve, and the domain runs (QEMU unlocked both disks).
// Delete removes the key-manager secrets. (The start and stop were
// TestLibvirtEncryptedStart's, which made the same disks.)
func TestLibvirtShelveUnshelve(t *testing.T) {
	t.Parallel()
	e, uri, km := encryptedRealEnv(t)
	ctx := context.Background()
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	inst, err := e.apply("name: " + name + "\nproject_id: p1\n" +
		"disks: [{name: vda, size: 16M, tag: root, encrypted: true}, {name: vdb, size: 8M, encrypted: true}, {name: vdc, size: 8M}]\n")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), name) })
	secs := diskSecretsOf(inst)
	if n := strings.Count(virshOut(t, uri, "dumpxml", "--inactive", name), "<encryption format='luks'"); n != 2 {
		t.Fatalf("%d disks with <encryption format='luks'>, want 2", n)
	}
	secretsDefined := func(when string, want bool) {
		t.Helper()
		list := virshOut(t, uri, "secret-list")
		for d, id := range secs {
			if strings.Contains(list, id) != want {
				t.Errorf("%s: libvirt secret %s of %s defined: %t, want %t", when, id, d, !want, want)
			}
		}
	}
	secretsDefined("before start", false)
	if _, err := e.c.Start(ctx, name); err != nil {
		t.Fatalf("start (QEMU must unlock both LUKS disks): %v", err)
	}
	secretsDefined("running", true)
	if _, err := e.c.Stop(ctx, name, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	secretsDefined("after stop", false)
	// A start without hostctl's secrets fails: QEMU cannot open the disks.
	if out, err := execCommand("virsh", "-q", "-c", uri, "start", name); err == nil {
		virshOut(t, uri, "destroy", name)
		t.Fatalf("virsh start succeeded without the secrets: %s", out)
	}
	pass, err := km.Passphrase(ctx, secs["vda"])
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(e.dir, "instances", name)
	vda := filepath.Join(dir, "disk-vda.qcow2")
	writePattern(t, vda, pass)

	got, err := e.c.Shelve(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateShelved {
		t.Errorf("state %q", got.State)
	}
	check := func(when string) {
		t.Helper()
		if !domainGone(uri, name) {
			t.Errorf("%s: libvirt still has the domain", when)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: instance directory: %v", when, err)
		}
		list := virshOut(t, uri, "secret-list")
		for d, id := range secs {
			if strings.Contains(list, id) {
				t.Errorf("%s: libvirt secret of %s still defined", when, d)
			}
			if _, err := km.Get(ctx, id); err != nil {
				t.Errorf("%s: key-manager secret of %s: %v", when, d, err)
			}
		}
	}
	check("after shelve")
	if err := e.c.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	check("after a reconcile")
	if g, err := e.c.Get(ctx, name); err != nil || g.State != StateShelved {
		t.Errorf("after a reconcile: %+v, %v", g, err)
	}

	got, err = e.c.Unshelve(ctx, name)
	if err != nil {
		t.Fatalf("unshelve (QEMU must unlock both LUKS disks): %v", err)
	}
	if st := strings.TrimSpace(virshOut(t, uri, "domstate", name)); st != "running" || got.State != "running" {
		t.Errorf("after unshelve: virsh %q, state %q", st, got.State)
	}
	if after := diskSecretsOf(got); !mapsEqual(after, secs) {
		t.Errorf("secrets after unshelve %v, want the same %v", after, secs)
	}
	if err := readPattern(t, vda, pass); err != nil {
		t.Errorf("the root disk after unshelve: %v", err)
	}
	list := virshOut(t, uri, "secret-list")
	for d, id := range secs {
		if !strings.Contains(list, id) {
			t.Errorf("libvirt secret of %s missing while running", d)
		}
	}
	if _, err := e.Catalog().Image(ctx, ShelvedImageName(name)); err == nil {
		t.Error("the shelved image outlived the unshelve")
	}
	if err := e.c.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	if l, _ := km.List(ctx, ""); len(l) != 0 {
		t.Errorf("key-manager secrets after delete: %+v", l)
	}
}

// TestLibvirtRescue: against the real libvirtd, QEMU and qemu-img: a
// rescue with a plain image and with an encrypted image boots (QEMU
// opens the rescue disk, the encrypted one through a libvirt secret made
// for the rescue holding the rescue image's own secret — no key-manager
// secret is made — and the LUKS root disk as vdb); qemu-img info finds
// the rescue disk encrypted iff the image is; a reconcile leaves the
// rescue definition; unrescue restores the original definition, runs it,
// and removes the rescue disk's libvirt secret.
func TestLibvirtRescue(t *testing.T) {
	t.Parallel()
	e, uri, km := encryptedRealEnv(t)
	ctx := context.Background()
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	inst, err := e.apply("name: " + name + "\nproject_id: p1\n" +
		"disks: [{name: vda, size: 16M, tag: root, encrypted: true}, {name: vdb, size: 8M}]\n")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), name) })
	imgSec := makeEncryptedImage(t, e, km, "enc-img", "p1")
	p := filepath.Join(t.TempDir(), "plain.qcow2")
	if err := images.New(t.TempDir(), images.Options{QemuImg: testenv.LookPath(t, "qemu-img")}).Create(ctx, images.Disk{Path: p, Size: "16M"}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Catalog().ImportImage(ctx, "plain-img", nil, f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := e.c.Start(ctx, name); err != nil {
		t.Fatal(err)
	}
	orig := virshOut(t, uri, "dumpxml", "--inactive", name)
	rescue := filepath.Join(e.dir, "instances", name, "disk.rescue")

	for _, tc := range []struct {
		image     string
		encrypted bool
	}{{"plain-img", false}, {"enc-img", true}} {
		got, err := e.c.Rescue(ctx, name, RescueRequest{Image: tc.image, TimeoutSeconds: 0.1})
		if err != nil {
			t.Fatalf("rescue with %s: %v", tc.image, err)
		}
		if got.State != StateRescue || strings.TrimSpace(virshOut(t, uri, "domstate", name)) != "running" {
			t.Errorf("%s: state %q, virsh %s", tc.image, got.State, virshOut(t, uri, "domstate", name))
		}
		blk := virshOut(t, uri, "domblklist", name)
		if i, j := strings.Index(blk, "disk.rescue"), strings.Index(blk, "disk-vda.qcow2"); i < 0 || j < i || !strings.Contains(blk, "vdb") {
			t.Errorf("%s: rescue domain disks:\n%s", tc.image, blk)
		}
		if enc := qemuImgEncrypted(t, rescue); enc != tc.encrypted {
			t.Errorf("%s: qemu-img info says the rescue disk encrypted=%t", tc.image, enc)
		}
		// The rescue image's own secret, through a libvirt secret made
		// for the rescue; no key-manager secret made (issue 20 item 5).
		st, _, _ := e.c.vmStateOf(ctx, inst.Spec.UUID)
		copyID := st.RescueLibvirtSecret
		if bds, _, _ := e.c.loadBlockDevices(ctx, inst.Spec.UUID); bds.Disks[rescueDisk].EncryptionSecretUUID != "" {
			t.Errorf("%s: the rescue made a secret copy %s", tc.image, bds.Disks[rescueDisk].EncryptionSecretUUID)
		}
		if tc.encrypted {
			if st.RescueSecret != imgSec.UUID || copyID == "" || copyID == imgSec.UUID || !strings.Contains(virshOut(t, uri, "secret-list"), copyID) {
				t.Errorf("%s: rescue secret %q (image's %s), libvirt secret %q not defined", tc.image, st.RescueSecret, imgSec.UUID, copyID)
			}
		} else if copyID != "" || st.RescueSecret != "" {
			t.Errorf("%s: a plain rescue disk has a secret %s/%s", tc.image, st.RescueSecret, copyID)
		}
		during := virshOut(t, uri, "dumpxml", "--inactive", name)
		if err := e.c.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		if after := virshOut(t, uri, "dumpxml", "--inactive", name); after != during {
			t.Errorf("%s: a reconcile changed the rescue definition:\n%s", tc.image, diffLines(during, after))
		}

		got, err = e.c.Unrescue(ctx, name)
		if err != nil {
			t.Fatalf("unrescue from %s: %v", tc.image, err)
		}
		if got.State != "running" || strings.TrimSpace(virshOut(t, uri, "domstate", name)) != "running" {
			t.Errorf("%s: after unrescue state %q", tc.image, got.State)
		}
		if after := virshOut(t, uri, "dumpxml", "--inactive", name); after != orig {
			t.Errorf("%s: definition after unrescue:\n%s", tc.image, diffLines(orig, after))
		}
		if fileExists(rescue) {
			t.Errorf("%s: the rescue disk outlived the rescue", tc.image)
		}
		if copyID != "" {
			if strings.Contains(virshOut(t, uri, "secret-list"), copyID) {
				t.Errorf("%s: the rescue disk's libvirt secret outlived the rescue", tc.image)
			}
		}
		if _, err := km.Get(ctx, imgSec.UUID); err != nil {
			t.Errorf("%s: the image's own secret: %v", tc.image, err)
		}
	}
	if _, err := e.c.Stop(ctx, name, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
}
