package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/testenv"
)

// cloudInitMounts runs testdata/cloudinit_mounts.py on an unpacked config
// drive: what cloud-init's cc_mounts resolves ephemeral0, swap and the
// other EC2 names to, for a guest with these block devices.
func cloudInitMounts(t *testing.T, dir string, devices []string) (bdm map[string]string, resolved map[string]*string) {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", "cloudinit_mounts.py"))
	if err != nil {
		t.Fatal(err)
	}
	devs, _ := json.Marshal(devices)
	r := runCmd(t, testenv.ChildEnv(nil), systemPython, script, dir, string(devs))
	if r.code != 0 {
		t.Fatalf("cloudinit_mounts.py: %s", r)
	}
	var out struct {
		BDM      map[string]string  `json:"block_device_mapping"`
		Resolved map[string]*string `json:"resolved"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("cloudinit_mounts.py printed %q: %v", r.stdout, err)
	}
	return out.BDM, out.Resolved
}

func str(p *string) string {
	if p == nil {
		return "(none)"
	}
	return *p
}

// TestFlavorsImagesCloudInit drives flavors and images through the CLI,
// the admin API and the daemon (embedded store, no hypervisor): a flavor's
// disks are laid out as Nova lays them out, named in the EC2
// block-device-mapping as Nova names them, so that cloud-init's own
// cc_mounts mounts the flavor's ephemeral disk at /mnt and enables its
// swap, and never a spec's data disk; the ephemeral encryption policy
// turns the flavor's request into per-disk requests, and its conflicts
// are 409s that create nothing.
func TestFlavorsImagesCloudInit(t *testing.T) {
	t.Parallel()
	requireCloudInit(t)
	qemuImg := testenv.LookPath(t, "qemu-img")
	xorriso := testenv.LookPath(t, "xorriso")
	d := startDaemon(t, daemonOptions{Args: []string{"--virt", "none"}})
	work := t.TempDir()

	// Flavors, with an extra spec Nova's ecosystem spells True.
	r := d.MustCtl("flavor", "create", "m1.eph", "--vcpus", "2", "--ram", "512", "--disk", "1", "--ephemeral", "2", "--swap", "256",
		"--property", "hw:ephemeral_encryption=True", "--property", "custom:thing=kept as given", "--output", "json")
	var f types.Flavor
	if err := json.Unmarshal([]byte(r.stdout), &f); err != nil {
		t.Fatal(err)
	}
	if f.ExtraSpecs["custom:thing"] != "kept as given" || f.ExtraSpecs["hw:ephemeral_encryption"] != "True" || f.Ephemeral != 2 {
		t.Fatalf("flavor = %+v", f)
	}
	if r := d.Ctl("flavor", "create", "bad", "--vcpus", "1", "--ram", "64", "--disk", "0", "--property", "hw:ephemeral_encryption=maybe"); r.code != 1 ||
		!strings.Contains(r.stderr, "extra_specs[hw:ephemeral_encryption]") || !strings.Contains(r.stderr, "maybe") {
		t.Fatalf("bad boolean: %s", r)
	}
	if r := d.MustCtl("flavor", "list"); !strings.Contains(r.stdout, "m1.eph") || strings.Contains(r.stdout, "bad") {
		t.Fatalf("flavor list:\n%s", r.stdout)
	}

	// Images, made by the real qemu-img and imported through the API.
	src := filepath.Join(work, "deb.qcow2")
	if out, err := exec.Command(qemuImg, "create", "-q", "-f", "qcow2", src, "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, out)
	}
	r = d.MustCtl("image", "import", src, "--name", "deb", "--property", "os_distro=debian", "--output", "json")
	var img types.Image
	if err := json.Unmarshal([]byte(r.stdout), &img); err != nil {
		t.Fatal(err)
	}
	if img.Format != "qcow2" || img.VirtualSize != 64<<20 || img.Properties["os_distro"] != "debian" {
		t.Fatalf("image = %+v", img)
	}
	if _, err := os.Stat(filepath.Join(d.DataDir, "images", "deb.json")); err != nil {
		t.Fatalf("no sidecar: %v", err)
	}
	if r := d.Ctl("image", "import", src, "--name", "x", "--property", "hw_ephemeral_encryption=nah"); r.code != 1 || !strings.Contains(r.stderr, "properties[hw_ephemeral_encryption]") {
		t.Fatalf("bad image property: %s", r)
	}

	// An instance from the flavor and the image, with a data disk.
	const name = "flv-1"
	d.Apply("name: " + name + "\nflavor: m1.eph\nimage: deb\naddresses: [192.0.2.77]\n" +
		"disks: [{name: vda, kind: root, tag: rootfs}, {name: sda, bus: scsi, tag: data, size: 1G}]\n")
	var inst types.Instance
	if err := json.Unmarshal([]byte(d.MustCtl("instance", "show", name, "--output", "json").stdout), &inst); err != nil {
		t.Fatal(err)
	}
	type disk struct{ name, kind, size, format string }
	var got []disk
	for _, dk := range inst.Spec.Disks {
		got = append(got, disk{dk.Name, dk.Kind, dk.Size, dk.EncryptionFormat})
		if !dk.Encrypted {
			t.Errorf("disk %s: not asked to be encrypted (the flavor says hw:ephemeral_encryption=True)", dk.Name)
		}
	}
	want := []disk{{"vda", "root", "1G", "luks"}, {"vdb", "ephemeral", "2G", "luks"}, {"vdc", "swap", "256M", "luks"}, {"sda", "", "1G", "luks"}}
	if len(got) != len(want) {
		t.Fatalf("disks = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("disk %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if inst.Spec.VCPUs != 2 || inst.Spec.MemoryMiB != 512 || inst.Spec.Disks[0].Tag != "rootfs" {
		t.Errorf("instance = vcpus %d, memory %d, root tag %q", inst.Spec.VCPUs, inst.Spec.MemoryMiB, inst.Spec.Disks[0].Tag)
	}

	// cloud-init, reading the config drive, mounts the flavor's disks only.
	iso := filepath.Join(work, "drive.iso")
	d.MustCtl("configdrive", "build", name, "-o", iso)
	dir := filepath.Join(work, "iso")
	if r := runCmd(t, testenv.ChildEnv(nil), xorriso, "-osirrox", "on", "-indev", iso, "-extract", "/", dir); r.code != 0 {
		t.Fatalf("unpack: %s", r)
	}
	guestDevs := []string{"/dev/vda", "/dev/vdb", "/dev/vdc", "/dev/sda"}
	bdm, resolved := cloudInitMounts(t, dir, guestDevs)
	for k, v := range map[string]string{"ami": "vda", "root": "/dev/vda", "ephemeral0": "/dev/vdb", "swap": "/dev/vdc", "ebs0": "/dev/sda"} {
		if bdm[k] != v {
			t.Errorf("block-device-mapping %s = %q, want %q (all: %v)", k, bdm[k], v, bdm)
		}
	}
	for k, v := range map[string]string{"ephemeral0": "/dev/vdb", "swap": "/dev/vdc", "ebs0": "/dev/sda", "root": "/dev/vda", "ephemeral1": "(none)"} {
		if str(resolved[k]) != v {
			t.Errorf("cc_mounts resolves %s to %s, want %s", k, str(resolved[k]), v)
		}
	}

	// A spec without a registered flavor: its data disks are volumes, and
	// cc_mounts mounts nothing at /mnt.
	r = d.Apply("name: plain-1\nflavor: m9.unregistered\naddresses: [192.0.2.78]\ndisks: [{name: vda, size: 1G}, {name: vdb, tag: scratch, size: 1G}]\n")
	if !strings.Contains(r.stderr, `warning: flavor "m9.unregistered" is not a registered flavor`) {
		t.Errorf("apply with an unregistered flavor: no warning: %s", r)
	}
	iso2 := filepath.Join(work, "plain.iso")
	d.MustCtl("configdrive", "build", "plain-1", "-o", iso2)
	dir2 := filepath.Join(work, "plain")
	if r := runCmd(t, testenv.ChildEnv(nil), xorriso, "-osirrox", "on", "-indev", iso2, "-extract", "/", dir2); r.code != 0 {
		t.Fatalf("unpack: %s", r)
	}
	_, resolved = cloudInitMounts(t, dir2, []string{"/dev/vda", "/dev/vdb"})
	if resolved["ephemeral0"] != nil || resolved["swap"] != nil || str(resolved["ebs0"]) != "/dev/vdb" {
		t.Errorf("without a flavor, cc_mounts resolves ephemeral0 %s, swap %s, ebs0 %s; want none, none, /dev/vdb",
			str(resolved["ephemeral0"]), str(resolved["swap"]), str(resolved["ebs0"]))
	}

	// In use: neither the flavor nor the image can go.
	if r := d.Ctl("flavor", "delete", "m1.eph"); r.code != 1 || !strings.Contains(r.stderr, "in use by instance(s) "+name) {
		t.Errorf("flavor delete in use: %s", r)
	}
	if r := d.Ctl("image", "delete", "deb"); r.code != 1 || !strings.Contains(r.stderr, "in use by instance(s) "+name) {
		t.Errorf("image delete in use: %s", r)
	}

	// The policy's conflicts: 409 naming both sides, nothing created.
	d.MustCtl("flavor", "create", "m1.noenc", "--vcpus", "1", "--ram", "256", "--disk", "1", "--property", "hw:ephemeral_encryption=no")
	src2 := filepath.Join(work, "enc.qcow2")
	if out, err := exec.Command(qemuImg, "create", "-q", "-f", "qcow2", src2, "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, out)
	}
	d.MustCtl("image", "import", src2, "--name", "wants-enc", "--property", "hw_ephemeral_encryption=yes")
	r = d.Ctl("instance", "apply", "-f", writeSpec(t, "name: clash-1\nflavor: m1.noenc\nimage: wants-enc\n"))
	if r.code != 1 || !strings.Contains(r.stderr, `flavor "m1.noenc" (hw:ephemeral_encryption=false)`) || !strings.Contains(r.stderr, `image "wants-enc" (hw_ephemeral_encryption=true)`) {
		t.Errorf("flavor and image disagree: %s", r)
	}
	if r := d.Ctl("instance", "show", "clash-1"); r.code == 0 {
		t.Errorf("the refused instance exists:\n%s", r.stdout)
	}

	// Resize: an encryption change is refused naming both flavors; a
	// bigger flavor with the same settings is taken, a smaller one not.
	r = d.Ctl("instance", "resize", name, "--flavor", "m1.noenc")
	if r.code != 1 || !strings.Contains(r.stderr, `flavor "m1.eph"`) || !strings.Contains(r.stderr, `flavor "m1.noenc"`) {
		t.Errorf("resize across encryption settings: %s", r)
	}
	d.MustCtl("flavor", "create", "m1.eph.big", "--vcpus", "4", "--ram", "1024", "--disk", "2", "--ephemeral", "3", "--swap", "512", "--property", "hw:ephemeral_encryption=1")
	d.MustCtl("instance", "resize", name, "--flavor", "m1.eph.big")
	if err := json.Unmarshal([]byte(d.MustCtl("instance", "show", name, "--output", "json").stdout), &inst); err != nil {
		t.Fatal(err)
	}
	if inst.Spec.Flavor != "m1.eph.big" || inst.Spec.VCPUs != 4 || inst.Spec.Disks[0].Size != "2G" || inst.Spec.Disks[1].Size != "3G" || inst.Spec.Disks[2].Size != "512M" ||
		inst.Spec.Disks[0].Tag != "rootfs" || inst.Spec.Disks[3].Tag != "data" {
		t.Errorf("resized = %+v", inst.Spec)
	}
	if r := d.Ctl("instance", "resize", name, "--flavor", "m1.eph"); r.code != 1 || !strings.Contains(r.stderr, "never shrunk") {
		t.Errorf("resize to a smaller flavor: %s", r)
	}

	// Rebuild: onto an image with other encryption settings, refused
	// naming both images; onto a plain one, done, other disks kept.
	if r := d.Ctl("instance", "rebuild", name, "--image", "wants-enc"); r.code != 1 || !strings.Contains(r.stderr, `image "deb"`) || !strings.Contains(r.stderr, `image "wants-enc"`) {
		t.Errorf("rebuild across encryption settings: %s", r)
	}
	d.MustCtl("image", "import", src2, "--name", "deb2")
	d.MustCtl("instance", "rebuild", name, "--image", "deb2")
	if err := json.Unmarshal([]byte(d.MustCtl("instance", "show", name, "--output", "json").stdout), &inst); err != nil {
		t.Fatal(err)
	}
	if inst.Spec.Image != "deb2" || len(inst.Spec.Disks) != 4 || inst.Spec.Disks[3].Tag != "data" {
		t.Errorf("rebuilt = %+v", inst.Spec)
	}

	// Free again: deletes go through.
	d.MustCtl("instance", "delete", name)
	d.MustCtl("flavor", "delete", "m1.eph.big")
	d.MustCtl("image", "delete", "deb2")
	if r := d.MustCtl("image", "list"); strings.Contains(r.stdout, "deb2") {
		t.Errorf("image list after delete:\n%s", r.stdout)
	}

	// The audit streams tell other tools.
	for stream, want := range map[string][]string{
		"flavors":   {"flavor.created", "flavor.deleted"},
		"images":    {"image.imported", "image.deleted"},
		"instances": {"instance.resized", "instance.rebuilt"},
	} {
		r := d.MustCtl("events", "list", stream, "--output", "json")
		for _, typ := range want {
			if !strings.Contains(r.stdout, `"`+typ+`"`) {
				t.Errorf("stream %s has no %s event:\n%s", stream, typ, r.stdout)
			}
		}
	}
}

// TestFlavorGuestSeesDisks boots a guest (Debian's kernel, a busybox
// initramfs, TCG) of an instance made from a flavor on the real libvirtd,
// and asks the guest what its disks are: its ephemeral disk carries the
// ext4 label ephemeral0 (what cloud-init mounts at /mnt), its swap disk
// is swap the kernel takes, and it has the flavor's vCPUs.
func TestFlavorGuestSeesDisks(t *testing.T) {
	t.Parallel()
	uri := testenv.RequireLibvirt(t)
	qemuImg := testenv.LookPath(t, "qemu-img")
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	script := "echo \"vmeta-guest: ephemeral0 at $(findfs LABEL=ephemeral0)\"\n" +
		"swapon /dev/vdc && echo \"vmeta-guest: swaps $(grep -c '^/dev/vdc ' /proc/swaps)\"\n" +
		"echo \"vmeta-guest: cpus $(grep -c ^processor /proc/cpuinfo)\"\n"
	g := testenv.BuildGuest(t, t.TempDir(), script)
	d := startLibvirtDaemon(t, uri, "--domain-kernel", g.Kernel, "--domain-initrd", g.Initrd, "--domain-cmdline", g.Cmdline)

	src := filepath.Join(t.TempDir(), "root.qcow2")
	if out, err := exec.Command(qemuImg, "create", "-q", "-f", "qcow2", src, "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, out)
	}
	d.MustCtl("image", "import", src, "--name", "root-img")
	d.MustCtl("flavor", "create", "g.eph", "--vcpus", "2", "--ram", "256", "--disk", "1", "--ephemeral", "1", "--swap", "32")
	d.Apply("name: " + name + "\nflavor: g.eph\nimage: root-img\n")
	d.MustCtl("instance", "start", name)
	console := filepath.Join(d.DataDir, "instances", name, "console.log")
	log := testenv.WaitConsole(t, console, testenv.GuestDone, 4*time.Minute)
	for _, want := range []string{"vmeta-guest: ephemeral0 at /dev/vdb", "vmeta-guest: swaps 1", "vmeta-guest: cpus 2"} {
		if !strings.Contains(log, want) {
			t.Errorf("the guest did not say %q; console:\n%s", want, log)
		}
	}
	d.MustCtl("instance", "stop", name, "--timeout", "1s")
	d.MustCtl("instance", "delete", name)
}

// TestFlavorsAcrossHosts: flavors live in the store, so two hosts sharing
// a Redis see the same ones; a flavor used by one host's instance cannot
// be deleted from the other host, and the refusal names the instance.
// Images are each host's own.
func TestFlavorsAcrossHosts(t *testing.T) {
	t.Parallel()
	url := testenv.StartRedis(t)
	a := startDaemon(t, daemonOptions{Store: url, Args: append([]string{"--virt", "none"}, hostArgs("host-a")...)})
	b := startDaemon(t, daemonOptions{Store: url, Args: append([]string{"--virt", "none"}, hostArgs("host-b")...)})

	a.MustCtl("flavor", "create", "shared.f", "--vcpus", "1", "--ram", "128", "--disk", "0", "--swap", "16", "--property", "hw:ephemeral_encryption=false")
	var f types.Flavor
	if err := json.Unmarshal([]byte(b.MustCtl("flavor", "show", "shared.f", "--output", "json").stdout), &f); err != nil {
		t.Fatal(err)
	}
	if f.Swap != 16 || f.ExtraSpecs["hw:ephemeral_encryption"] != "false" {
		t.Fatalf("host-b sees %+v", f)
	}
	a.Apply("name: xh-1\nflavor: shared.f\naddresses: [192.0.2.91]\n")
	if r := b.Ctl("flavor", "delete", "shared.f"); r.code != 1 || !strings.Contains(r.stderr, "in use by instance(s) xh-1") {
		t.Errorf("host-b deletes a flavor host-a's instance uses: %s", r)
	}
	if r := b.Ctl("flavor", "create", "shared.f", "--vcpus", "2", "--ram", "128", "--disk", "0"); r.code != 1 || !strings.Contains(r.stderr, "exists") {
		t.Errorf("host-b creates the same flavor again: %s", r)
	}
	if r := b.MustCtl("image", "list", "--output", "json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("host-b's image directory: %s", r.stdout)
	}
	a.MustCtl("instance", "delete", "xh-1")
	b.MustCtl("flavor", "delete", "shared.f")
	if r := a.MustCtl("flavor", "list", "--output", "json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("host-a still lists flavors: %s", r.stdout)
	}
}
