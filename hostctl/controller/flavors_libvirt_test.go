package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
)

// qemuInfo is what the real qemu-img says of a disk file.
func qemuInfo(t *testing.T, p string) (virtualSize int64, backing string) {
	t.Helper()
	out, err := exec.Command(testenv.LookPath(t, "qemu-img"), "info", "--output=json", "-U", p).Output()
	if err != nil {
		t.Fatalf("qemu-img info %s: %v", p, err)
	}
	var info struct {
		VirtualSize int64  `json:"virtual-size"`
		Backing     string `json:"backing-filename"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatal(err)
	}
	return info.VirtualSize, info.Backing
}

// domainDisks reads `virsh dumpxml --inactive` with regular expressions
// (not hostctl/virt): each disk's target and source file, the vCPUs and
// the memory in KiB.
func domainDisks(t *testing.T, uri, name string) (disks map[string]string, vcpus, memKiB string) {
	t.Helper()
	xml := virshOut(t, uri, "dumpxml", "--inactive", name)
	disks = map[string]string{}
	for _, m := range regexp.MustCompile(`(?s)<disk type='file' device='disk'>.*?<source file='([^']*)'.*?<target dev='([^']*)'`).FindAllStringSubmatch(xml, -1) {
		disks[m[2]] = m[1]
	}
	if m := regexp.MustCompile(`<vcpu[^>]*>(\d+)</vcpu>`).FindStringSubmatch(xml); m != nil {
		vcpus = m[1]
	}
	if m := regexp.MustCompile(`<memory unit='KiB'>(\d+)</memory>`).FindStringSubmatch(xml); m != nil {
		memKiB = m[1]
	}
	return disks, vcpus, memKiB
}

// TestFlavorLibvirt applies an instance from a flavor and an imported
// image on the real libvirtd and qemu-img: the domain has the flavor's
// vCPUs and memory and Nova's disks (disk over the image, disk.eph0 over
// an ext4 template, disk.swap over a swap template) next to the spec's
// data disk, and the EC2 block-device-mapping names them. A resize grows
// them (a failure at the publish shrinks them back and restores the
// swap disk and the domain), never shrinks them; a rebuild makes only the
// root disk anew.
func TestFlavorLibvirt(t *testing.T) {
	e, uri := realEnv(t)
	testenv.LookPath(t, "mkfs.ext4")
	testenv.LookPath(t, "mkswap")
	ctx := context.Background()
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	qemuImg := testenv.LookPath(t, "qemu-img")

	mkImage := func(imgName string, props map[string]string) images.Image {
		p := filepath.Join(t.TempDir(), "src.qcow2")
		if out, err := exec.Command(qemuImg, "create", "-q", "-f", "qcow2", p, "64M").CombinedOutput(); err != nil {
			t.Fatalf("qemu-img: %v: %s", err, out)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := e.Catalog().ImportImage(ctx, imgName, props, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	mkImage("deb", nil)
	for _, f := range []flavors.Flavor{
		{Name: "f.small", VCPUs: 2, RAM: 192, Disk: 1, Ephemeral: 1, Swap: 32},
		{Name: "f.big", VCPUs: 1, RAM: 256, Disk: 2, Ephemeral: 2, Swap: 64},
		{Name: "f.enc", VCPUs: 1, RAM: 256, Disk: 4, Ephemeral: 4, Swap: 64, ExtraSpecs: map[string]string{"hw:ephemeral_encryption": "true"}},
	} {
		if _, err := e.Catalog().CreateFlavor(ctx, f); err != nil {
			t.Fatal(err)
		}
	}

	inst := e.mustApply("name: " + name + "\nflavor: f.small\nimage: deb\n" +
		"disks: [{name: vda, kind: root, tag: rootfs}, {name: sda, bus: scsi, size: 8M, tag: data}]\n")
	dir := filepath.Join(e.dir, "instances", name)
	disks, vcpus, mem := domainDisks(t, uri, name)
	wantDisks := map[string]string{
		"vda": filepath.Join(dir, "disk"), "vdb": filepath.Join(dir, "disk.eph0"),
		"vdc": filepath.Join(dir, "disk.swap"), "sda": filepath.Join(dir, "disk-sda.qcow2"),
	}
	if len(disks) != len(wantDisks) {
		t.Fatalf("domain disks = %v, want %v", disks, wantDisks)
	}
	for target, p := range wantDisks {
		if disks[target] != p {
			t.Errorf("domain disk %s = %q, want %q", target, disks[target], p)
		}
	}
	if vcpus != "2" || mem != "196608" {
		t.Errorf("domain: %s vCPUs, %s KiB; want 2 and 196608 (f.small)", vcpus, mem)
	}
	base := filepath.Join(e.dir, "instances", "_base")
	for _, tc := range []struct {
		file    string
		size    int64
		backing string
	}{
		{"disk", 1 << 30, filepath.Join(e.dir, "images", "deb.qcow2")},
		{"disk.eph0", 1 << 30, filepath.Join(base, "ephemeral_1G_ext4")},
		{"disk.swap", 32 << 20, filepath.Join(base, "swap_32M")},
		{"disk-sda.qcow2", 8 << 20, ""},
	} {
		if size, backing := qemuInfo(t, filepath.Join(dir, tc.file)); size != tc.size || backing != tc.backing {
			t.Errorf("%s: %d bytes over %q, want %d over %q", tc.file, size, backing, tc.size, tc.backing)
		}
	}
	doc, err := e.st.Document(ctx, inst.Spec.UUID)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := metadata.DecodeTree(doc.Tree)
	if err != nil {
		t.Fatal(err)
	}
	var md map[string]json.RawMessage
	raw, _ := tree.Get("ec2/latest/meta-data.json")
	if err := json.Unmarshal(raw, &md); err != nil {
		t.Fatal(err)
	}
	if got := string(md["block-device-mapping"]); got != `{"ami":"vda","ebs0":"/dev/sda","ephemeral0":"/dev/vdb","root":"/dev/vda","swap":"/dev/vdc"}` {
		t.Errorf("block-device-mapping = %s", got)
	}

	// In use: the flavor and the image stay.
	if err := e.Catalog().DeleteFlavor(ctx, "f.small"); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), name) {
		t.Errorf("delete flavor in use: %v", err)
	}
	if err := e.Catalog().DeleteImage(ctx, "deb"); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), name) {
		t.Errorf("delete image in use: %v", err)
	}

	// Resize with the publish failing: everything back as it was.
	eph0, _ := os.Stat(filepath.Join(dir, "disk.eph0"))
	e.st.failPut = true
	if _, err := e.c.Resize(ctx, name, "f.big"); err == nil || !strings.Contains(err.Error(), "injected failure") {
		t.Fatalf("resize with a failing store: %v", err)
	}
	e.st.failPut = false
	for _, tc := range []struct {
		file    string
		size    int64
		backing string
	}{
		{"disk", 1 << 30, filepath.Join(e.dir, "images", "deb.qcow2")},
		{"disk.eph0", 1 << 30, filepath.Join(base, "ephemeral_1G_ext4")},
		{"disk.swap", 32 << 20, filepath.Join(base, "swap_32M")},
	} {
		if size, backing := qemuInfo(t, filepath.Join(dir, tc.file)); size != tc.size || backing != tc.backing {
			t.Errorf("after the failed resize, %s: %d bytes over %q, want %d over %q", tc.file, size, backing, tc.size, tc.backing)
		}
	}
	if _, vcpus, mem := domainDisks(t, uri, name); vcpus != "2" || mem != "196608" {
		t.Errorf("after the failed resize the domain has %s vCPUs, %s KiB", vcpus, mem)
	}

	// Resize for real.
	if _, err := e.c.Resize(ctx, name, "f.big"); err != nil {
		t.Fatal(err)
	}
	if _, vcpus, mem := domainDisks(t, uri, name); vcpus != "1" || mem != "262144" {
		t.Errorf("resized domain: %s vCPUs, %s KiB; want 1 and 262144", vcpus, mem)
	}
	for _, tc := range []struct {
		file    string
		size    int64
		backing string
	}{
		{"disk", 2 << 30, filepath.Join(e.dir, "images", "deb.qcow2")},
		{"disk.eph0", 2 << 30, filepath.Join(base, "ephemeral_1G_ext4")}, // grown in place: the same file
		{"disk.swap", 64 << 20, filepath.Join(base, "swap_64M")},         // made anew
	} {
		if size, backing := qemuInfo(t, filepath.Join(dir, tc.file)); size != tc.size || backing != tc.backing {
			t.Errorf("resized %s: %d bytes over %q, want %d over %q", tc.file, size, backing, tc.size, tc.backing)
		}
	}
	if now, _ := os.Stat(filepath.Join(dir, "disk.eph0")); !os.SameFile(eph0, now) {
		t.Error("the ephemeral disk was replaced, not grown")
	}
	if _, err := e.c.Resize(ctx, name, "f.small"); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "never shrunk") {
		t.Errorf("resize down: %v", err)
	}
	if _, err := e.c.Resize(ctx, name, "f.enc"); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), `flavor "f.big"`) || !strings.Contains(err.Error(), `flavor "f.enc"`) {
		t.Errorf("resize to an encrypting flavor: %v", err)
	}

	// A running instance is neither resized nor rebuilt.
	// (Starting a domain needs a bootable guest; the refusal is checked
	// on the state alone in the fake-hypervisor tests.)

	// Rebuild: a new root disk over the new image; the others untouched.
	mkImage("deb2", nil)
	mkImage("deb-enc", map[string]string{"hw_ephemeral_encryption": "yes"})
	data, _ := os.Stat(filepath.Join(dir, "disk-sda.qcow2"))
	eph0, _ = os.Stat(filepath.Join(dir, "disk.eph0"))
	if _, err := e.c.Rebuild(ctx, name, "deb-enc"); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), `image "deb"`) || !strings.Contains(err.Error(), `image "deb-enc"`) {
		t.Errorf("rebuild onto an encrypting image: %v", err)
	}
	if _, err := e.c.Rebuild(ctx, name, "deb2"); err != nil {
		t.Fatal(err)
	}
	if size, backing := qemuInfo(t, filepath.Join(dir, "disk")); size != 2<<30 || backing != filepath.Join(e.dir, "images", "deb2.qcow2") {
		t.Errorf("rebuilt root: %d bytes over %q", size, backing)
	}
	for f, was := range map[string]os.FileInfo{"disk-sda.qcow2": data, "disk.eph0": eph0} {
		if now, err := os.Stat(filepath.Join(dir, f)); err != nil || !os.SameFile(was, now) {
			t.Errorf("rebuild replaced %s", f)
		}
	}
	got, err := e.c.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Disks[0].Tag != "rootfs" || got.Spec.Disks[3].Tag != "data" || got.Spec.Image != "deb2" {
		t.Errorf("rebuilt instance = %+v", got.Spec)
	}
	if entries, _ := os.ReadDir(dir); slices.ContainsFunc(entries, func(d os.DirEntry) bool { return strings.HasSuffix(d.Name(), ".old") }) {
		t.Errorf("files set aside are left: %v", entries)
	}

	if err := e.c.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := e.Catalog().DeleteImage(ctx, "deb"); err != nil {
		t.Errorf("delete the freed image: %v", err)
	}
}

// TestFlavorPolicyCreatesNothing: a flavor and an image disagreeing on
// encryption is a conflict before libvirt or a file is touched.
func TestFlavorPolicyCreatesNothing(t *testing.T) {
	e, uri := realEnv(t)
	ctx := context.Background()
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	if _, err := e.Catalog().CreateFlavor(ctx, flavors.Flavor{Name: "f.plain", VCPUs: 1, RAM: 128, Disk: 1, Ephemeral: 1,
		ExtraSpecs: map[string]string{"hw:ephemeral_encryption": "false"}}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "src")
	if out, err := exec.Command(testenv.LookPath(t, "qemu-img"), "create", "-q", "-f", "qcow2", p, "16M").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	b, _ := os.ReadFile(p)
	if _, err := e.Catalog().ImportImage(ctx, "enc", map[string]string{"hw_ephemeral_encryption": "True"}, bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	_, err := e.apply("name: " + name + "\nflavor: f.plain\nimage: enc\n")
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), `flavor "f.plain"`) || !strings.Contains(err.Error(), `image "enc"`) {
		t.Fatalf("apply = %v, want a conflict naming both", err)
	}
	if out := virshOut(t, uri, "list", "--all", "--name"); strings.Contains(out, name) {
		t.Errorf("domain %s defined", name)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "instances", name)); !os.IsNotExist(err) {
		t.Errorf("instance directory: %v", err)
	}
	if _, err := e.st.Instance(ctx, name); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("record: %v", err)
	}
}
