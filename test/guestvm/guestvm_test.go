package guestvm

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/guest"
	"github.com/vmeta/vmeta/guest/udev"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/testenv"
)

// Timeouts under TCG: a boot with udev takes about a minute here.
const (
	bootTimeout    = 6 * time.Minute
	hotplugTimeout = 4 * time.Minute
	injectTimeout  = 3 * time.Minute
)

// The tags of the test instance. weirdTag needs escaping (spaces, a
// quote, udev's $ substitution).
const (
	weirdTag  = `db "primary" $logs`
	shareTag  = "shared-data"
	hotTag    = "hotplugged"
	shareText = "hello-from-the-host"
)

// What the injected drive of phase 3 adds, because an instance spec
// cannot say it: Nova's 36-character volume serial where QEMU shows the
// guest 20 bytes (a virtio serial over 20 bytes is refused in a spec), a
// second tag with '/' (a spec disk has one tag, and '/' is refused), an
// entry of a type the agent does not know, and a share the host does not
// attach.
const (
	longSer    = "disk-vol-24235252-0123456789abcdef"
	slashTag   = "logs/archive 2024"
	unattached = "not-attached"
)

// Guest-side programs: systemd-udevd and udevadm (one binary in Debian's
// udev 252), udev's helpers and rules, iproute2's ip (busybox's knows no
// altnames) and findmnt.
var (
	udevadmBin = "/usr/bin/udevadm"
	ipBin      = "/usr/sbin/ip"
	findmntBin = "/usr/bin/findmnt"
	udevRules  = []string{"50-udev-default.rules", "60-block.rules", "60-cdrom_id.rules", "60-persistent-storage.rules",
		"75-net-description.rules", "80-net-setup-link.rules"}
	udevProgs = []string{"ata_id", "scsi_id", "cdrom_id"}
)

func baseFiles() []testenv.GuestFile {
	fs := []testenv.GuestFile{
		{Path: "/usr/bin/udevadm", Src: udevadmBin, Libs: true},
		{Path: "/lib/systemd/systemd-udevd", Link: "/usr/bin/udevadm"},
		{Path: "/usr/sbin/ip", Src: ipBin, Libs: true},
		{Path: "/usr/bin/findmnt", Src: findmntBin, Libs: true},
		{Path: "/usr/lib/systemd/network/99-default.link", Src: "/usr/lib/systemd/network/99-default.link"},
		{Path: "/etc/passwd", Data: []byte("root:x:0:0:root:/root:/bin/sh\n")},
		{Path: "/etc/group", Data: []byte("root:x:0:\ndisk:x:6:\ncdrom:x:24:\ntape:x:26:\nkvm:x:104:\n")},
	}
	for _, r := range udevRules {
		fs = append(fs, testenv.GuestFile{Path: "/usr/lib/udev/rules.d/" + r, Src: "/usr/lib/udev/rules.d/" + r})
	}
	for _, p := range udevProgs {
		// udevd runs helpers from its compile-time /lib/udev (Debian
		// 12 keeps /lib and /usr/lib apart there).
		fs = append(fs, testenv.GuestFile{Path: "/lib/udev/" + p, Src: "/usr/lib/udev/" + p, Libs: true})
	}
	return fs
}

// guestScript starts udevd and the agent (run mode), prints what the
// guest sees (phase 1, lines "vmeta-guest: <what> ..."), waits for the
// tag hostctl changes on the running instance (phase 2, "vmeta-guest2:"),
// then for the disk hostctl hot-plugs to get its link (phase 3,
// "vmeta-guest3:"), then for the injected drive the test drops into the
// share, applies it once and prints what the guest sees again (phase 4,
// "vmeta-guest4:").
const guestScript = `
mkdir -p /run/udev /etc/udev /mnt/shares
/lib/systemd/systemd-udevd --daemon --resolve-names=never 2>/run/udevd.log
udevadm trigger --type=subsystems --action=add
udevadm trigger --type=devices --action=add
udevadm settle --timeout=120 || echo "vmeta-guest: settle-timeout"
echo "vmeta-guest: udev-ready $(cut -d' ' -f1 /proc/uptime)"

dump_log() { sed "s/^/$1: agentlog /" "$2"; }

# report P prints what udev, the links, the interfaces, the mount table
# and the agent say, each line "P: <what> ...".
report() {
	P=$1
	for b in /sys/block/vd* /sys/block/sd* /sys/block/sr*; do
		[ -e "$b" ] || continue
		n=${b##*/}
		serial=$(cat $b/serial 2>/dev/null || tail -c +5 $b/device/vpd_pg80 2>/dev/null | tr -d ' \0')
		echo "$P: block $n serial=$serial"
		udevadm info --query=property --name=/dev/$n | sed "s|^|$P: udev $n |"
	done
	for l in /dev/disk/by-tag/*; do
		[ -e "$l" ] && printf '%s: link %s %s\n' "$P" "${l##*/}" "$(readlink -f "$l")"
	done
	for n in /sys/class/net/*; do
		nm=${n##*/}
		[ "$nm" = lo ] && continue
		udevadm info --query=property --path=$n | sed "s|^|$P: udevnet $nm |"
	done
	/usr/sbin/ip -o link | sed "s/^/$P: iplink /"
	findmnt -n -o SOURCE,TARGET,FSTYPE /mnt/shares/shared-data | sed "s|^|$P: findmnt |"
	printf '%s: sharefile %s\n' "$P" "$(cat /mnt/shares/shared-data/hello.txt)"
	vmeta-agent status | sed "s|^|$P: status |"
	vmeta-agent status --output json | sed "s|^|$P: json |"
	for t in squidcache oracledb scsi-by-address sata-by-port hotplugged; do printf '%s: find %s %s\n' "$P" $t "$(vmeta-agent find --tag $t --type disk)"; done
	printf '%s: find weird %s\n' "$P" "$(vmeta-agent find --tag 'db "primary" $logs')"
	printf '%s: find slash %s\n' "$P" "$(vmeta-agent find --tag 'logs/archive 2024')"
	printf '%s: find nfvfunc1 %s\n' "$P" "$(vmeta-agent find --tag nfvfunc1 --type nic)"
	printf '%s: find share %s\n' "$P" "$(vmeta-agent find --tag shared-data --type share)"
}

# No periodic re-read: after the first pass only uevents (a device added
# or removed, the config drive's medium changed) make the agent read the
# metadata again.
vmeta-agent run --poll-interval 1h --log-level debug >/run/agent.log 2>&1 &
AGENT=$!
i=0
until grep -q 'msg=applied' /run/agent.log && findmnt -n /mnt/shares/shared-data >/dev/null 2>&1; do
	i=$((i+1))
	if [ $i -gt 900 ]; then echo "vmeta-guest: agent-timeout"; break; fi
	sleep 0.2
done
udevadm settle --timeout=60
report vmeta-guest
vmeta-agent apply --share-wait 0s >/run/apply2.log 2>&1
echo "vmeta-guest: apply2 rc=$?"
sed 's/^/vmeta-guest: apply2 /' /run/apply2.log
grep -E '^(VmHWM|VmRSS)' /proc/$AGENT/status | sed 's/^/vmeta-guest: mem /'
dump_log vmeta-guest /run/agent.log
echo "vmeta-guest: phase1-done $(cut -d' ' -f1 /proc/uptime)"

i=0
while [ ! -e /dev/disk/by-tag/scsi-retagged ] || [ -e /dev/disk/by-tag/scsi-by-address ]; do
	i=$((i+1))
	if [ $i -gt 1200 ]; then echo "vmeta-guest2: retag-timeout"; break; fi
	sleep 0.2
done
echo "vmeta-guest2: retagged $(cut -d' ' -f1 /proc/uptime) $(readlink -f /dev/disk/by-tag/scsi-retagged)"
dump_log vmeta-guest2 /run/agent.log
echo "vmeta-guest2: phase2-done"

i=0
while [ ! -e /dev/disk/by-tag/hotplugged ]; do
	i=$((i+1))
	if [ $i -gt 1200 ]; then echo "vmeta-guest3: hotplug-timeout"; break; fi
	sleep 0.2
done
echo "vmeta-guest3: hotlink $(cut -d' ' -f1 /proc/uptime) $(readlink -f /dev/disk/by-tag/hotplugged)"
[ -e /dev/disk/by-tag/hotplugged ] && udevadm info --query=property --name="$(readlink -f /dev/disk/by-tag/hotplugged)" | sed 's/^/vmeta-guest3: hotudev /'
grep -E '^(VmHWM|VmRSS)' /proc/$AGENT/status | sed 's/^/vmeta-guest3: mem /'
kill $AGENT
wait $AGENT
dump_log vmeta-guest3 /run/agent.log
echo "vmeta-guest3: phase3-done"

i=0
while [ ! -e /mnt/shares/shared-data/injected.config ]; do
	i=$((i+1))
	if [ $i -gt 900 ]; then echo "vmeta-guest4: injected-timeout"; break; fi
	sleep 0.2
done
vmeta-agent apply --config-drive /mnt/shares/shared-data/injected.config --share-wait 0s --log-level debug >/run/apply4.log 2>&1
echo "vmeta-guest4: apply4 rc=$?"
sed 's/^/vmeta-guest4: apply4 /' /run/apply4.log
udevadm settle --timeout=60
report vmeta-guest4
echo "vmeta-guest4: phase4-done"
`

// buildAgent builds the static agent binary.
func buildAgent(t *testing.T, dir string) string {
	t.Helper()
	goBin := testenv.LookPath(t, "go")
	out := filepath.Join(dir, "vmeta-agent")
	cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./guest/cmd/vmeta-agent")
	cmd.Dir = moduleRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build vmeta-agent: %v\n%s", err, b)
	}
	return out
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

func mac(t *testing.T) string {
	m, err := virt.GenerateMAC()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func randomUUID(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// instanceSpec is the spec the test applies: two tagged virtio disks (one
// encrypted, with a weird tag), two tagged SCSI disks (one found by its
// serial, one by its address), a tagged SATA disk, two tagged NICs and a
// virtiofs share (a share of the registry: a directory under the
// daemon's share root, registered first). hostctl creates the disks;
// libvirt chooses every address the spec leaves open.
func instanceSpec(name, mac1, mac2, shareID, addrTag string) string {
	return fmt.Sprintf(`name: %s
disks:
  - {name: vda, size: 16M, serial: %s, tag: squidcache}
  - {name: vdb, size: 16M, serial: vol-vdb, tag: '%s', encrypted: true}
  - {name: sda, bus: scsi, size: 16M, serial: vol-sda, tag: oracledb}
  - {name: sdb, bus: scsi, size: 16M, address: "0:0:2:0", tag: %s}
  # SATA, reported on the scsi bus as controller:0:0:port; no serial (QEMU
  # makes one up), so the AHCI port decides.
  - {name: sdc, bus: sata, size: 16M, tag: sata-by-port}
nics:
  - {mac: "%s", tag: nfvfunc1}
  - {mac: "%s", tag: nfvfunc2}
shares:
  - {share_id: %s, tag: %s}
`, name, longSer[:20], weirdTag, addrTag, mac1, mac2, shareID, shareTag)
}

// TestAgentInBootedGuest is the acceptance test of vmeta-agent, with
// hostctl as the compute agent: `hostctl serve --virt libvirt` creates the
// disks, defines the domain, builds the config drive from the addresses
// libvirt assigned and starts it; the agent in the guest tags what the
// drive describes. `hostctl instance attach-disk` then hot-plugs a tagged
// disk into the running guest: hostctl republishes and swaps the cdrom's
// medium, the agent sees the media change and the new disk gets its link.
// Last, in the same guest, the agent applies a drive the test derives from
// hostctl's with what a spec cannot express (see longSer).
func TestAgentInBootedGuest(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	for _, p := range []string{udevadmBin, ipBin, findmntBin, "/usr/lib/udev/scsi_id"} {
		if _, err := os.Stat(p); err != nil {
			testenv.Require(t, p, "install udev, iproute2 and util-linux (test/setup)")
		}
	}
	testenv.LookPath(t, "qemu-img")
	virsh := testenv.LookPath(t, "virsh")

	work := t.TempDir()
	start := time.Now()
	agentBin := buildAgent(t, work)
	hostctlBin := buildHostctl(t, work)
	if fi, err := os.Stat(agentBin); err == nil {
		t.Logf("vmeta-agent (static, -s -w): %.1f MiB", float64(fi.Size())/(1<<20))
	}
	t.Logf("built vmeta-agent and hostctl (race %t): %s", raceEnabled, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	g := testenv.BuildGuestImage(t, work, baseFiles(), []testenv.GuestFile{{Path: "/usr/bin/vmeta-agent", Src: agentBin, Mode: 0o755}}, guestScript)
	t.Logf("initramfs: %s", time.Since(start).Round(time.Millisecond))

	d := startHostd(t, hostctlBin, uri, g)
	share := filepath.Join(d.DataDir, "shares", "data") // under the default share root
	if err := os.MkdirAll(share, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(share, "hello.txt"), []byte(shareText), 0o644); err != nil {
		t.Fatal(err)
	}
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	mac1, mac2, shareID := mac(t), mac(t), randomUUID(t)
	writeSpec := func(addrTag string) string {
		p := filepath.Join(work, addrTag+".yaml")
		if err := os.WriteFile(p, []byte(instanceSpec(name, mac1, mac2, shareID, addrTag)), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	specFile := writeSpec("scsi-by-address")
	// The spec names the share; the apply attaches it (share mappings).
	d.ctl("share", "create", "--id", shareID, "--proto", "local", "--export", share, "--project", "demo")

	// Apply: hostctl defines the domain and publishes what libvirt chose.
	start = time.Now()
	var inst types.Instance
	d.ctlJSON(&inst, "instance", "apply", "-f", specFile)
	t.Logf("hostctl instance apply (5 disks created, define, read back, publish): %s", time.Since(start).Round(time.Millisecond))
	if inst.State != "shutoff" || inst.ConfigDrive != filepath.Join(d.DataDir, "instances", name, "disk.config") {
		t.Fatalf("after apply: state %q, config drive %q", inst.State, inst.ConfigDrive)
	}
	in := inst.Spec
	for _, k := range in.Disks {
		t.Logf("disk %s %s %s serial %q tag %q encrypted %t", k.Name, model.MetadataBus(k.Bus), k.Address, k.Serial, k.Tag, k.Encrypted)
		if k.Address == "" {
			t.Errorf("disk %s: no address after apply", k.Name)
		}
	}
	for _, n := range in.NICs {
		t.Logf("nic %s %s tag %q", n.Address, n.MAC, n.Tag)
	}
	checkDrive(t, inst.ConfigDrive, &inst)

	bootStart := time.Now()
	var started types.Instance
	d.ctlJSON(&started, "instance", "start", name)
	if started.State != "running" {
		t.Fatalf("state after start %q", started.State)
	}
	console := filepath.Join(d.DataDir, "instances", name, "console.log")
	out := testenv.WaitConsole(t, console, "vmeta-guest: phase1-done", bootTimeout)
	t.Logf("boot to phase 1 report under TCG: %s", time.Since(bootStart).Round(time.Millisecond))
	checkPhase1(t, in, parseReport(t, out, "vmeta-guest"))
	if t.Failed() {
		t.FailNow()
	}

	// A metadata-only change of the running instance: hostctl republishes
	// and swaps the config drive's medium. The agent polls no more and no
	// device comes or goes, so the media change is what tells it.
	retagStart := time.Now()
	var retag types.Instance
	d.ctlJSON(&retag, "instance", "apply", "-f", writeSpec("scsi-retagged"))
	t.Logf("hostctl instance apply (a tag changed, running): revision %d, state %s, in %s", retag.Revision, retag.State, time.Since(retagStart).Round(time.Millisecond))
	checkMedium(t, virsh, uri, d, &retag)
	out = testenv.WaitConsole(t, console, "vmeta-guest2: phase2-done", hotplugTimeout)
	t.Logf("re-tag: apply to new link %s (seen on the console)", time.Since(retagStart).Round(time.Second))
	r2 := parseReport(t, out, "vmeta-guest2")
	checkPhase2(t, r2)

	// Hot-plug a tagged disk through hostctl: it attaches it, republishes
	// and swaps the config drive's medium again.
	hotStart := time.Now()
	var hot types.Instance
	d.ctlJSON(&hot, "instance", "attach-disk", name, "--tag", hotTag, "--serial", "vol-hot", "--size", "16M")
	attached := time.Since(hotStart)
	var hotDisk *types.Disk
	for i, k := range hot.Spec.Disks {
		if k.Tag == hotTag {
			hotDisk = &hot.Spec.Disks[i]
		}
	}
	if hotDisk == nil || hotDisk.Address == "" || len(hot.Warnings) != 0 {
		t.Fatalf("attach-disk: hot disk %+v, warnings %v", hotDisk, hot.Warnings)
	}
	t.Logf("hostctl instance attach-disk: %s at %s, revision %d, in %s", hotDisk.Name, hotDisk.Address, hot.Revision, attached.Round(time.Millisecond))
	medium := checkMedium(t, virsh, uri, d, &hot)
	out = testenv.WaitConsole(t, console, "vmeta-guest3: phase3-done", hotplugTimeout)
	t.Logf("hot-plug: attach-disk to link %s (seen on the console)", time.Since(hotStart).Round(time.Second))
	checkPhase3(t, parseReport(t, out, "vmeta-guest3"), len(r2.lines["agentlog"]))

	// Phase 4: what a spec cannot express, on the same guest.
	writeInjectedDrive(t, medium, filepath.Join(share, "injected.config"))
	out = testenv.WaitConsole(t, console, "vmeta-guest4: phase4-done", injectTimeout)
	checkPhase4(t, hot.Spec, parseReport(t, out, "vmeta-guest4"))
	testenv.WaitConsole(t, console, testenv.GuestDone, time.Minute)

	d.ctl("instance", "delete", name)
}

// cdrom reads the config drive cdrom's medium from `virsh dumpxml` (live
// or --inactive), with a regular expression rather than hostctl/virt.
func cdrom(t *testing.T, virsh, uri, name string, live bool) string {
	t.Helper()
	args := []string{"-q", "-c", uri, "dumpxml", name}
	if !live {
		args = append(args, "--inactive")
	}
	out, err := exec.Command(virsh, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("virsh dumpxml: %v: %s", err, out)
	}
	b := regexp.MustCompile(`(?s)<disk type='file' device='cdrom'>.*?</disk>`).Find(out)
	if b == nil {
		t.Fatalf("domain %s has no cdrom:\n%s", name, out)
	}
	if m := regexp.MustCompile(`<source file='([^']*)'`).FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return "(empty)"
}

// checkMedium checks, after a publish of the running instance inst, that
// the domain's cdrom holds the rebuilt drive as a file of its own
// (disk.config.<revision>), with the devices hostctl reported, while the
// persistent definition keeps disk.config; the earlier media are gone. It
// returns the medium.
func checkMedium(t *testing.T, virsh, uri string, d *hostd, inst *types.Instance) string {
	t.Helper()
	dir := filepath.Join(d.DataDir, "instances", inst.Spec.Name)
	medium := filepath.Join(dir, fmt.Sprintf("disk.config.%d", inst.Revision))
	if got := cdrom(t, virsh, uri, inst.Spec.Name, true); got != medium {
		t.Errorf("the running domain's cdrom holds %s, want the rebuilt drive %s", got, medium)
	}
	if got := cdrom(t, virsh, uri, inst.Spec.Name, false); got != filepath.Join(dir, "disk.config") {
		t.Errorf("the persistent definition's cdrom holds %s, want disk.config", got)
	}
	old, _ := filepath.Glob(filepath.Join(dir, "disk.config.*"))
	if len(old) != 1 || old[0] != medium {
		t.Errorf("medium files %v, want only %s", old, medium)
	}
	checkDrive(t, medium, inst)
	checkDrive(t, filepath.Join(dir, "disk.config"), inst)
	return medium
}

// checkDrive reads a config drive hostctl wrote and checks that its
// devices are those hostctl reported.
func checkDrive(t *testing.T, path string, inst *types.Instance) {
	t.Helper()
	tree, label, err := configdrive.Read(path)
	if err != nil {
		t.Fatalf("config drive %s: %v", path, err)
	}
	md, ok := tree.Get("openstack/latest/meta_data.json")
	if !ok || label != "config-2" {
		t.Fatalf("config drive %s: label %q, meta_data.json %t", path, label, ok)
	}
	var doc struct {
		Devices []metadata.Device `json:"devices"`
	}
	if err := json.Unmarshal(md, &doc); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(doc.Devices)
	want, _ := json.Marshal(inst.Devices)
	if !bytes.Equal(got, want) {
		t.Errorf("config drive %s devices:\n%s\nhostctl reported:\n%s", path, got, want)
	}
}

// writeInjectedDrive writes into the share the drive of phase 3: hostctl's
// drive at from, with what no spec can say — Nova's 36-character serial
// for the virtio disk whose 20-byte serial QEMU shows, a second tag with
// '/' on the SCSI disk vol-sda, a "gpu" entry, a share the host does not
// attach. Written next to its name and renamed, so the guest never sees
// half of it.
func writeInjectedDrive(t *testing.T, from, to string) {
	t.Helper()
	tree, _, err := configdrive.Read(from)
	if err != nil {
		t.Fatal(err)
	}
	const p = "openstack/latest/meta_data.json"
	var md map[string]any
	if err := json.Unmarshal(tree.Files[p], &md); err != nil {
		t.Fatal(err)
	}
	devs := md["devices"].([]any)
	for _, x := range devs {
		dev := x.(map[string]any)
		if dev["serial"] == longSer[:20] {
			dev["serial"] = longSer
		}
		if dev["serial"] == "vol-sda" {
			dev["tags"] = append(dev["tags"].([]any), slashTag)
		}
	}
	md["devices"] = append(devs,
		map[string]any{"type": "gpu", "bus": "pci", "address": "0000:00:1e.0"},
		map[string]any{"type": "share", "bus": "none", "address": "none", "share_id": randomUUID(t), "tag": unattached},
	)
	if tree.Files[p], err = json.Marshal(md); err != nil {
		t.Fatal(err)
	}
	tmp := to + ".tmp"
	if err := configdrive.Build(tmp, tree.ConfigDriveFiles(), configdrive.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, to); err != nil {
		t.Fatal(err)
	}
}

// report is what the guest printed in one phase.
type report struct {
	lines   map[string][]string          // kind -> lines
	udev    map[string]map[string]string // block device -> property -> value
	udevNet map[string]map[string]string // interface -> property -> value
	serial  map[string]string            // block device -> serial
	links   map[string]string            // link name -> device node
	find    map[string]string
	status  *guest.State
	raw     string
}

// parseReport reads the lines "<prefix>: <kind> <rest>" of the console.
func parseReport(t *testing.T, out, prefix string) *report {
	t.Helper()
	reLine := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(prefix) + `: (\S+) ?(.*?)\r?$`)
	r := &report{lines: map[string][]string{}, udev: map[string]map[string]string{}, udevNet: map[string]map[string]string{},
		serial: map[string]string{}, links: map[string]string{}, find: map[string]string{}, raw: out}
	var js strings.Builder
	for _, m := range reLine.FindAllStringSubmatch(out, -1) {
		kind, rest := m[1], m[2]
		r.lines[kind] = append(r.lines[kind], rest)
		switch kind {
		case "block":
			name, s, _ := strings.Cut(rest, " serial=")
			r.serial[name] = s
		case "udev", "udevnet":
			dev, kv, _ := strings.Cut(rest, " ")
			k, v, _ := strings.Cut(kv, "=")
			to := r.udev
			if kind == "udevnet" {
				to = r.udevNet
			}
			if to[dev] == nil {
				to[dev] = map[string]string{}
			}
			to[dev][k] = v
		case "link":
			if i := strings.LastIndex(rest, " "); i > 0 {
				r.links[rest[:i]] = rest[i+1:]
			}
		case "find":
			k, v, _ := strings.Cut(rest, " ")
			r.find[k] = v
		case "json":
			js.WriteString(rest + "\n")
		}
	}
	if js.Len() > 0 {
		var st guest.State
		if err := json.Unmarshal([]byte(js.String()), &st); err != nil {
			t.Errorf("%s status --output json: %v\n%s", prefix, err, js.String())
		} else {
			r.status = &st
		}
	}
	return r
}

// deviceWithSerial returns the guest block device showing serial.
func (r *report) deviceWithSerial(serial string) string {
	for n, s := range r.serial {
		if s == serial {
			return n
		}
	}
	return ""
}

// diskDevices finds the guest device of each disk of in: by serial, the
// SCSI disk without one by its target/LUN, the SATA disk by its AHCI
// port.
func diskDevices(t *testing.T, in *types.InstanceSpec, r *report) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range in.Disks {
		dev := ""
		switch {
		case k.Serial != "":
			dev = r.deviceWithSerial(k.Serial)
		case k.Bus == "scsi":
			for n, props := range r.udev {
				if strings.HasSuffix(props["ID_PATH"], "-scsi-0:0:2:0") {
					dev = n
				}
			}
		case k.Bus == "sata":
			// udev's path_id names an AHCI device by its 1-based port:
			// ...-ata-<port+1>.0.
			port := k.Address[strings.LastIndex(k.Address, ":")+1:]
			for n, props := range r.udev {
				if strings.HasPrefix(n, "sd") && strings.Contains(props["ID_PATH"]+".", "-ata-"+strconv.Itoa(atoi(port)+1)+".") {
					dev = n
				}
			}
		}
		if dev == "" {
			t.Errorf("disk %s (serial %q): not found in the guest", k.Name, k.Serial)
			for n, props := range r.udev {
				t.Logf("guest %s: ID_BUS=%s ID_TYPE=%s ID_PATH=%s ID_SERIAL=%s", n, props["ID_BUS"], props["ID_TYPE"], props["ID_PATH"], props["ID_SERIAL"])
			}
			continue
		}
		out[k.Name] = dev
	}
	return out
}

// checkDisk checks one disk's udev properties and links against its tags.
func checkDisk(t *testing.T, r *report, name, dev string, tags []string, encrypted bool) {
	t.Helper()
	props := r.udev[dev]
	if got, want := props[udev.PropTags], udev.TagValue(tags); got != want {
		t.Errorf("%s (%s): %s=%q, want %q", dev, name, udev.PropTags, got, want)
	}
	if got := props[udev.PropEncrypted] == "1"; got != encrypted {
		t.Errorf("%s (%s): %s=%q, encrypted in metadata: %v", dev, name, udev.PropEncrypted, props[udev.PropEncrypted], encrypted)
	}
	for _, tag := range tags {
		link := udev.EncodeTag(tag)
		if got := r.links[link]; got != "/dev/"+dev {
			t.Errorf("/dev/disk/by-tag/%s -> %q, want /dev/%s", link, got, dev)
		}
		if !strings.Contains(props["DEVLINKS"], "/dev/disk/by-tag/"+link) {
			t.Errorf("%s DEVLINKS %q lack disk/by-tag/%s", dev, props["DEVLINKS"], link)
		}
	}
}

// checkMatchedBy checks that the agent matched every disk and NIC by the
// address the metadata gives (hostctl's, read back from libvirt): the
// guest found a device there, so the address is the real one.
func checkMatchedBy(t *testing.T, st *guest.State) {
	t.Helper()
	for _, ds := range st.Devices {
		if ds.Type != "disk" && ds.Type != "nic" {
			continue
		}
		want := ds.Bus + " " + ds.Address
		if !strings.Contains(strings.Join(ds.By, ", "), want) {
			t.Errorf("%s %v (%s %s) matched by %v: not by its address %q", ds.Type, ds.Tags, ds.Bus, ds.Address, ds.By, want)
		}
		for _, n := range ds.Notes {
			if strings.Contains(n, "not visible") {
				t.Errorf("%s %v: %s", ds.Type, ds.Tags, n)
			}
		}
	}
}

func checkPhase1(t *testing.T, in *types.InstanceSpec, r *report) {
	t.Helper()
	for _, bad := range []string{"agent-timeout", "settle-timeout"} {
		if len(r.lines[bad]) > 0 {
			t.Fatalf("guest: %s\n%s", bad, r.raw)
		}
	}
	for _, l := range r.lines["agentlog"] {
		t.Logf("agent: %s", l)
	}
	for _, l := range r.lines["status"] {
		t.Logf("status: %s", l)
	}

	// Each tagged disk: the properties, the link, find. The SCSI disk
	// without a serial is found by its address (0:0:2:0), the SATA disk
	// by its port.
	devs := diskDevices(t, in, r)
	for _, k := range in.Disks {
		if dev := devs[k.Name]; dev != "" {
			checkDisk(t, r, k.Name, dev, []string{k.Tag}, k.Encrypted)
			t.Logf("disk %s (%s %s): guest %s %s=%q links %s", k.Name, model.MetadataBus(k.Bus), k.Address, dev, udev.PropTags, r.udev[dev][udev.PropTags], r.udev[dev]["DEVLINKS"])
		}
	}
	if len(r.links) != 5 {
		t.Errorf("links: %v, want the 5 disk tags' links", r.links)
	}
	for name, tag := range map[string]string{"vda": "squidcache", "sda": "oracledb", "sdb": "scsi-by-address", "sdc": "sata-by-port"} {
		if dev := devs[name]; dev != "" && r.find[tag] != "/dev/"+dev {
			t.Errorf("find --tag %s --type disk = %q, want /dev/%s", tag, r.find[tag], dev)
		}
	}
	if dev := devs["vdb"]; dev != "" && r.find["weird"] != "/dev/"+dev {
		t.Errorf("find --tag %q = %q, want /dev/%s", weirdTag, r.find["weird"], dev)
	}
	// The config drive carries nothing.
	for n, props := range r.udev {
		if strings.HasPrefix(n, "sr") && (props[udev.PropTags] != "" || props[udev.PropEncrypted] != "") {
			t.Errorf("config drive %s: %v", n, props)
		}
	}

	// NICs: VMETA_TAGS in udev and an alternative name per tag.
	for _, n := range in.NICs {
		var ifname string
		for name, props := range r.udevNet {
			if strings.EqualFold(props["ID_NET_NAME_MAC"], "enx"+strings.ReplaceAll(n.MAC, ":", "")) || readAddr(r, name) == n.MAC {
				ifname = name
			}
		}
		if ifname == "" {
			t.Errorf("NIC %s: not in the guest", n.MAC)
			continue
		}
		if got := r.udevNet[ifname][udev.PropTags]; got != n.Tag {
			t.Errorf("NIC %s (%s): %s=%q, want %q", ifname, n.MAC, udev.PropTags, got, n.Tag)
		}
		found := false
		for _, l := range r.lines["iplink"] {
			if strings.Contains(l, "link/ether "+n.MAC) {
				found = true
				if !strings.Contains(l, "altname "+n.Tag) {
					t.Errorf("ip -o link for %s: no altname %s: %s", n.MAC, n.Tag, l)
				}
				t.Logf("ip -o link: %s", l)
			}
		}
		if !found {
			t.Errorf("ip -o link shows no %s", n.MAC)
		}
		if n.Tag == "nfvfunc1" && r.find["nfvfunc1"] != ifname {
			t.Errorf("find --tag nfvfunc1 --type nic = %q, want %s", r.find["nfvfunc1"], ifname)
		}
	}

	// The share hostctl attached.
	checkShare(t, r)

	// The status: every entry matched or mounted, by the addresses hostctl
	// published, nothing to report.
	if st := r.status; st == nil {
		t.Error("no status --output json")
	} else {
		if len(st.Problems) != 0 {
			t.Errorf("status problems: %v", st.Problems)
		}
		for _, ds := range st.Devices {
			if ds.Status != "matched" && ds.Status != "mounted" {
				t.Errorf("status: %+v", ds)
			}
		}
		if len(st.Devices) != 8 {
			t.Errorf("status lists %d devices, want 8 (5 disks, 2 NICs, 1 share)", len(st.Devices))
		}
		checkMatchedBy(t, st)
		by := matchedBy(st)
		for tag, want := range map[string]string{
			"squidcache":      "serial " + longSer[:20],
			"oracledb":        "serial vol-sda",
			"scsi-by-address": "scsi 0:0:2:0",
			"sata-by-port":    "scsi 0:0:0:",
		} {
			if !strings.Contains(by[tag], want) {
				t.Errorf("disk %q matched by %q, want %q among them", tag, by[tag], want)
			}
			t.Logf("disk %q matched by %s", tag, by[tag])
		}
	}

	// A second pass changes nothing.
	for _, l := range r.lines["apply2"] {
		t.Logf("second apply: %s", l)
	}
	apply2 := strings.Join(r.lines["apply2"], "\n")
	if !strings.Contains(apply2, `msg="nothing to change"`) || !strings.Contains(apply2, "rc=0") {
		t.Errorf("second apply:\n%s", apply2)
	}

	// Figures.
	for _, l := range r.lines["agentlog"] {
		if strings.Contains(l, "msg=applied") {
			if m := regexp.MustCompile(`since_start=(\S+) peak_rss="?([^"]+)"?`).FindStringSubmatch(l); m != nil {
				t.Logf("FIGURE agent start to all tags applied and shares mounted: %s (peak RSS then %s)", m[1], m[2])
			}
			break
		}
	}
	for _, l := range r.lines["mem"] {
		t.Logf("FIGURE daemon after the first pass: %s", l)
	}
	for _, l := range r.lines["apply2"] {
		if m := regexp.MustCompile(`elapsed=(\S+) peak_rss="?([^"]+)"?`).FindStringSubmatch(l); m != nil {
			t.Logf("FIGURE one-shot apply (nothing to change): %s, peak RSS %s", m[1], m[2])
		}
	}
}

// matchedBy maps each disk's first tag to how the agent matched it.
func matchedBy(st *guest.State) map[string]string {
	by := map[string]string{}
	for _, ds := range st.Devices {
		if ds.Type == "disk" && len(ds.Tags) > 0 {
			by[ds.Tags[0]] = strings.Join(ds.By, ", ")
		}
	}
	return by
}

// checkShare: the virtiofs share is mounted under its tag and serves the
// host's file.
func checkShare(t *testing.T, r *report) {
	t.Helper()
	if got := strings.Join(r.lines["findmnt"], "|"); got != shareTag+" /mnt/shares/"+shareTag+" virtiofs" {
		t.Errorf("findmnt: %q", got)
	}
	if got := strings.Join(r.lines["sharefile"], "|"); got != shareText {
		t.Errorf("file read from the share: %q", got)
	}
	if r.find["share"] != "/mnt/shares/"+shareTag {
		t.Errorf("find --tag %s --type share = %q", shareTag, r.find["share"])
	}
}

func atoi(s string) int {
	n, _ := strconv.ParseInt(s, 16, 32)
	return int(n)
}

// readAddr finds an interface's MAC in the ip -o link lines.
func readAddr(r *report, ifname string) string {
	for _, l := range r.lines["iplink"] {
		f := strings.Fields(l)
		if len(f) > 1 && strings.TrimSuffix(f[1], ":") == ifname {
			for i, x := range f {
				if x == "link/ether" && i+1 < len(f) {
					return f[i+1]
				}
			}
		}
	}
	return ""
}

// checkPhase2: the tag hostctl changed on the running instance reached
// the guest through the media change alone — the agent logged the media
// change before it read the new metadata (it polls no more, and no device
// came or went) — and the disk's link follows.
func checkPhase2(t *testing.T, r *report) {
	t.Helper()
	if len(r.lines["retag-timeout"]) > 0 {
		for _, l := range r.lines["agentlog"] {
			t.Logf("agent: %s", l)
		}
		t.Fatalf("the new tag's link never appeared (or the old one never left)")
	}
	t.Logf("re-tagged link in the guest: %s", strings.Join(r.lines["retagged"], ""))
	medium, changed := -1, -1
	for i, l := range r.lines["agentlog"] {
		if medium < 0 && strings.Contains(l, "medium changed") {
			medium = i
		}
		if changed < 0 && strings.Contains(l, `msg="metadata changed"`) {
			changed = i
		}
		if medium >= 0 && i >= medium {
			t.Logf("agent: %s", l)
		}
	}
	if medium < 0 || changed < 0 || changed < medium {
		t.Errorf("the agent did not read the new metadata because of a media change (media change at log line %d, metadata changed at %d)", medium, changed)
	}
}

// checkPhase3: the disk hostctl hot-plugged, tagged by the drive hostctl
// swapped in, has its link and properties, and the agent saw that medium
// change too (in its log after line since, where phase 2's dump ended).
func checkPhase3(t *testing.T, r *report, since int) {
	t.Helper()
	if len(r.lines["hotplug-timeout"]) > 0 {
		for _, l := range r.lines["agentlog"] {
			t.Logf("agent: %s", l)
		}
		t.Fatalf("the hot-plugged disk's link never appeared")
	}
	props := map[string]string{}
	for _, l := range r.lines["hotudev"] {
		k, v, _ := strings.Cut(l, "=")
		props[k] = v
	}
	if props["ID_SERIAL"] != "vol-hot" || props[udev.PropTags] != hotTag {
		t.Errorf("the disk behind /dev/disk/by-tag/%s: %v", hotTag, props)
	}
	if hl := r.lines["hotlink"]; len(hl) > 0 {
		t.Logf("hot-plug link in the guest: %s", hl[0])
	}
	// What the agent logged since phase 2 dumped its log.
	medium := false
	for _, l := range r.lines["agentlog"][min(since, len(r.lines["agentlog"])):] {
		medium = medium || strings.Contains(l, "medium changed")
		if strings.Contains(l, "medium") || strings.Contains(l, "metadata changed") || strings.Contains(l, "msg=applied") {
			t.Logf("agent: %s", l)
		}
	}
	if !medium {
		t.Error("the agent logged no media change of the config drive after the hot-plug")
	}
	for _, l := range r.lines["mem"] {
		t.Logf("FIGURE daemon after hot-plug: %s", l)
	}
}

// checkPhase4: the injected drive, applied once by the same guest: the
// 36-character serial matches the 20 bytes QEMU shows, the second tag with
// '/' gets its escaped link next to the first, the unknown entry and the
// share that is not attached are reported (exit status 2), and everything
// else stays as it was.
func checkPhase4(t *testing.T, in *types.InstanceSpec, r *report) {
	t.Helper()
	if len(r.lines["injected-timeout"]) > 0 {
		t.Fatal("the guest never saw the injected drive in the share")
	}
	for _, l := range r.lines["apply4"] {
		t.Logf("injected apply: %s", l)
	}
	if got := strings.Join(r.lines["apply4"], "\n"); !strings.Contains(got, "rc=2") {
		t.Errorf("injected apply: want exit status 2 (applied, with problems):\n%s", got)
	}
	devs := diskDevices(t, in, r)
	for _, k := range in.Disks {
		dev := devs[k.Name]
		if dev == "" {
			continue
		}
		tags := []string{k.Tag}
		if k.Serial == "vol-sda" {
			tags = append(tags, slashTag)
		}
		checkDisk(t, r, k.Name, dev, tags, k.Encrypted)
	}
	if len(r.links) != 7 {
		t.Errorf("links: %v, want 7 (6 disk tags and the second tag of vol-sda)", r.links)
	}
	if dev := devs["sda"]; dev != "" && r.find["slash"] != "/dev/"+dev {
		t.Errorf("find --tag %q = %q, want /dev/%s", slashTag, r.find["slash"], dev)
	}
	checkShare(t, r)
	st := r.status
	if st == nil {
		t.Fatal("no status --output json")
	}
	problems := strings.Join(st.Problems, "\n")
	for _, want := range []string{`device type "gpu" is not one the agent knows`, `share "` + unattached + `"`} {
		if !strings.Contains(problems, want) {
			t.Errorf("status problems lack %q:\n%s", want, problems)
		}
	}
	for _, ds := range st.Devices {
		if ds.Status != "matched" && ds.Status != "mounted" && ds.ShareTag != unattached {
			t.Errorf("status: %+v", ds)
		}
	}
	if len(st.Devices) != 10 {
		t.Errorf("status lists %d devices, want 10 (6 disks, 2 NICs, 2 shares; the gpu entry is ignored)", len(st.Devices))
	}
	checkMatchedBy(t, st)
	if by := matchedBy(st)["squidcache"]; !strings.Contains(by, "serial "+longSer) {
		t.Errorf("the 36-character serial: squidcache matched by %q", by)
	} else {
		t.Logf("disk %q (metadata serial %s, QEMU shows 20 bytes) matched by %s", "squidcache", longSer, by)
	}
}
