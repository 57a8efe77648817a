package guestvm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

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
)

// The tags of the test instance. weirdTag needs escaping (spaces, a
// quote, udev's $ substitution); slashTag, which the instance spec
// refuses, is added to the metadata directly.
const (
	weirdTag  = `db "primary" $logs`
	slashTag  = "logs/archive 2024"
	shareTag  = "shared-data"
	hotTag    = "hotplugged"
	longSer   = "disk-vol-24235252-0123456789abcdef" // Nova's 36-character volume serial
	shareText = "hello-from-the-host"
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

// guestScript starts udevd, runs the agent, prints what the guest sees
// (every line "vmeta-guest: <what> ..."), then waits for the hot-plugged
// disk's link.
const guestScript = `
mkdir -p /run/udev /etc/udev /mnt/shares
/lib/systemd/systemd-udevd --daemon --resolve-names=never 2>/run/udevd.log
udevadm trigger --type=subsystems --action=add
udevadm trigger --type=devices --action=add
udevadm settle --timeout=120 || echo "vmeta-guest: settle-timeout"
echo "vmeta-guest: udev-ready $(cut -d' ' -f1 /proc/uptime)"

dump_log() { sed 's/^/vmeta-guest: agentlog /' /run/agent.log; }

vmeta-agent run --poll-interval 5s --log-level debug >/run/agent.log 2>&1 &
AGENT=$!
i=0
until grep -q 'msg=applied' /run/agent.log && findmnt -n /mnt/shares/shared-data >/dev/null 2>&1; do
	i=$((i+1))
	if [ $i -gt 900 ]; then echo "vmeta-guest: agent-timeout"; break; fi
	sleep 0.2
done
udevadm settle --timeout=60

for b in /sys/block/vd* /sys/block/sd* /sys/block/sr*; do
	[ -e "$b" ] || continue
	n=${b##*/}
	serial=$(cat $b/serial 2>/dev/null || tail -c +5 $b/device/vpd_pg80 2>/dev/null | tr -d ' \0')
	echo "vmeta-guest: block $n serial=$serial"
	udevadm info --query=property --name=/dev/$n | sed "s|^|vmeta-guest: udev $n |"
done
for l in /dev/disk/by-tag/*; do
	[ -e "$l" ] && printf 'vmeta-guest: link %s %s\n' "${l##*/}" "$(readlink -f "$l")"
done
for n in /sys/class/net/*; do
	nm=${n##*/}
	[ "$nm" = lo ] && continue
	udevadm info --query=property --path=$n | sed "s|^|vmeta-guest: udevnet $nm |"
done
/usr/sbin/ip -o link | sed 's/^/vmeta-guest: iplink /'
findmnt -n -o SOURCE,TARGET,FSTYPE /mnt/shares/shared-data | sed 's/^/vmeta-guest: findmnt /'
printf 'vmeta-guest: sharefile %s\n' "$(cat /mnt/shares/shared-data/hello.txt)"
vmeta-agent status | sed 's/^/vmeta-guest: status /'
vmeta-agent status --output json | sed 's/^/vmeta-guest: json /'
for t in squidcache oracledb scsi-by-address sata-by-port; do printf 'vmeta-guest: find %s %s\n' "$t" "$(vmeta-agent find --tag $t --type disk)"; done
printf 'vmeta-guest: find weird %s\n' "$(vmeta-agent find --tag 'db "primary" $logs')"
printf 'vmeta-guest: find nfvfunc1 %s\n' "$(vmeta-agent find --tag nfvfunc1 --type nic)"
printf 'vmeta-guest: find share %s\n' "$(vmeta-agent find --tag shared-data --type share)"
vmeta-agent apply --share-wait 0s >/run/apply2.log 2>&1
echo "vmeta-guest: apply2 rc=$?"
sed 's/^/vmeta-guest: apply2 /' /run/apply2.log
grep -E '^(VmHWM|VmRSS)' /proc/$AGENT/status | sed 's/^/vmeta-guest: mem /'
dump_log
echo "vmeta-guest: phase1-done $(cut -d' ' -f1 /proc/uptime)"

i=0
while [ ! -e /dev/disk/by-tag/hotplugged ]; do
	i=$((i+1))
	if [ $i -gt 1200 ]; then echo "vmeta-guest: hotplug-timeout"; break; fi
	sleep 0.2
done
echo "vmeta-guest: hotlink $(cut -d' ' -f1 /proc/uptime) $(readlink -f /dev/disk/by-tag/hotplugged)"
[ -e /dev/disk/by-tag/hotplugged ] && udevadm info --query=property --name="$(readlink -f /dev/disk/by-tag/hotplugged)" | sed 's/^/vmeta-guest: hotudev /'
grep -E '^(VmHWM|VmRSS)' /proc/$AGENT/status | sed 's/^/vmeta-guest: mem2 /'
kill $AGENT
wait $AGENT
dump_log
echo "vmeta-guest: phase2-done"
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

// testDir is the instance's host side: images, config drives, console
// log and the shared directory, all in one data directory.
type testDir struct {
	dir   string
	host  virt.Host
	share string
}

func newTestDir(t *testing.T) *testDir {
	d := &testDir{dir: t.TempDir()}
	d.share = filepath.Join(d.dir, "shares", "data")
	for _, p := range []string{filepath.Join(d.dir, "instances"), d.share} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(d.share, "hello.txt"), []byte(shareText), 0o644); err != nil {
		t.Fatal(err)
	}
	d.host = virt.Host{DataDir: d.dir, Disks: map[string]virt.DiskSource{}, SerialLog: "instances/console.log", ConfigDrive: "instances/disk.config"}
	return d
}

func (d *testDir) addImage(t *testing.T, name string) {
	t.Helper()
	p := filepath.Join("instances", name+".qcow2")
	if out, err := exec.Command(testenv.LookPath(t, "qemu-img"), "create", "-q", "-f", "qcow2", filepath.Join(d.dir, p), "16M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create %s: %v: %s", p, err, out)
	}
	d.host.Disks[name] = virt.DiskSource{Path: p}
}

// writeDrive renders the instance's metadata, adds what the instance spec
// cannot express (Nova's 36-character volume serial where QEMU shows 20
// bytes, a tag with '/', an entry of an unknown type, a share the host
// does not attach), and writes the config drive to rel.
func writeDrive(t *testing.T, d *testDir, in *model.Instance, rel string) {
	t.Helper()
	tree, err := metadata.Render(in, metadata.Options{})
	if err != nil {
		t.Fatalf("render metadata: %v", err)
	}
	p := "openstack/latest/meta_data.json"
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
	devs = append(devs,
		map[string]any{"type": "gpu", "bus": "pci", "address": "0000:00:1e.0"},
		map[string]any{"type": "share", "bus": "none", "address": "none", "share_id": randomUUID(t), "tag": "not-attached"},
	)
	md["devices"] = devs
	if tree.Files[p], err = json.Marshal(md); err != nil {
		t.Fatal(err)
	}
	if err := configdrive.Build(filepath.Join(d.dir, rel), tree.ConfigDriveFiles(), configdrive.Options{}); err != nil {
		t.Fatal(err)
	}
}

// TestAgentInBootedGuest is the acceptance test of vmeta-agent.
func TestAgentInBootedGuest(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	for _, p := range []string{udevadmBin, ipBin, findmntBin, "/usr/lib/udev/scsi_id"} {
		if _, err := os.Stat(p); err != nil {
			testenv.Require(t, p, "install udev, iproute2 and util-linux (test/setup)")
		}
	}
	virsh := testenv.LookPath(t, "virsh")
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout+hotplugTimeout+2*time.Minute)
	defer cancel()

	d := newTestDir(t)
	agentBin := buildAgent(t, d.dir)
	if fi, err := os.Stat(agentBin); err == nil {
		t.Logf("vmeta-agent (static, -s -w): %.1f MiB", float64(fi.Size())/(1<<20))
	}
	start := time.Now()
	g := testenv.BuildGuestImage(t, d.dir, baseFiles(), []testenv.GuestFile{{Path: "/usr/bin/vmeta-agent", Src: agentBin, Mode: 0o755}}, guestScript)
	t.Logf("initramfs: %s", time.Since(start).Round(time.Millisecond))

	for _, n := range []string{"vda", "vdb", "sda", "sdb", "sdc"} {
		d.addImage(t, n)
	}
	in := &model.Instance{
		Name: testenv.UniqueDomainName(t),
		UUID: randomUUID(t),
		Disks: []model.Disk{
			{Name: "vda", Bus: "virtio", Serial: longSer[:20], Tag: "squidcache"},
			{Name: "vdb", Bus: "virtio", Serial: "vol-vdb", Tag: weirdTag, Encrypted: true},
			{Name: "sda", Bus: "scsi", Serial: "vol-sda", Tag: "oracledb"},
			{Name: "sdb", Bus: "scsi", Address: "0:0:2:0", Tag: "scsi-by-address"},
			// SATA, reported on the scsi bus as controller:0:0:port; no
			// serial in the spec (QEMU makes one up), so the AHCI port
			// decides.
			{Name: "sdc", Bus: "sata", Tag: "sata-by-port"},
		},
		NICs:   []model.NIC{{MAC: mac(t), Tag: "nfvfunc1"}, {MAC: mac(t), Tag: "nfvfunc2"}},
		Shares: []model.Share{{ShareID: randomUUID(t), Tag: shareTag, Source: d.share}},
	}
	in.Normalize()
	if err := in.Validate(); err != nil {
		t.Fatal(err)
	}
	opts := virt.Options{MemoryMiB: 512, Kernel: g.Kernel, Initrd: g.Initrd, Cmdline: g.Cmdline}
	doc, err := virt.BuildDomain(in, d.host, opts)
	if err != nil {
		t.Fatal(err)
	}
	c, err := virt.Connect(ctx, uri, virt.ConnOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testenv.CleanupDomain(t, uri, in.Name)
	if _, err := c.Define(ctx, doc); err != nil {
		t.Fatalf("define: %v", err)
	}

	// The addresses libvirt assigned at define time, into the metadata.
	inactive, err := c.XML(ctx, in.Name, false)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := virt.ParseDevices(inactive)
	if err != nil {
		t.Fatal(err)
	}
	if err := devs.Apply(in); err != nil {
		t.Fatal(err)
	}
	writeDrive(t, d, in, d.host.ConfigDrive)
	for _, k := range in.Disks {
		t.Logf("disk %s %s %s serial %q tag %q", k.Name, model.MetadataBus(k.Bus), k.Address, k.Serial, k.Tag)
	}
	for _, n := range in.NICs {
		t.Logf("nic %s %s tag %q", n.Address, n.MAC, n.Tag)
	}

	bootStart := time.Now()
	if err := c.Start(ctx, in.Name); err != nil {
		t.Fatalf("start: %v", err)
	}
	// The live XML says what the inactive one said.
	live, err := c.XML(ctx, in.Name, true)
	if err != nil {
		t.Fatal(err)
	}
	liveDevs, err := virt.ParseDevices(live)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range in.Disks {
		if x, ok := liveDevs.Disk(k.Name); !ok || x.Address != k.Address {
			t.Errorf("disk %s: live address %q, inactive %q", k.Name, x.Address, k.Address)
		}
	}
	cdrom := ""
	for _, x := range liveDevs.Disks {
		if x.Alias == virt.ConfigDriveAlias {
			cdrom = x.Target
		}
	}

	console := filepath.Join(d.dir, d.host.SerialLog)
	out := testenv.WaitConsole(t, console, "vmeta-guest: phase1-done", bootTimeout)
	t.Logf("boot to phase 1 report under TCG: %s", time.Since(bootStart).Round(time.Millisecond))
	r := parseReport(t, out)
	checkPhase1(t, in, r)

	// Hot-plug a tagged disk, then give the guest new metadata by
	// swapping the config drive's medium.
	hot := model.Disk{Name: "vdc", Bus: "virtio", Serial: "vol-hot", Tag: hotTag}
	d.addImage(t, hot.Name)
	x, err := virt.DiskDeviceXML(hot, d.host, opts)
	if err != nil {
		t.Fatal(err)
	}
	hotStart := time.Now()
	if err := c.AttachDevice(ctx, in.Name, x, virt.AffectLive); err != nil {
		t.Fatalf("attach: %v", err)
	}
	live, err = c.XML(ctx, in.Name, true)
	if err != nil {
		t.Fatal(err)
	}
	if liveDevs, err = virt.ParseDevices(live); err != nil {
		t.Fatal(err)
	}
	in.Disks = append(in.Disks, hot)
	if err := liveDevs.Apply(in); err != nil {
		t.Fatal(err)
	}
	t.Logf("hot-plugged %s at %s", hot.Name, in.Disks[len(in.Disks)-1].Address)
	writeDrive(t, d, in, "instances/disk2.config")
	if b, err := exec.Command(virsh, "-c", uri, "change-media", in.Name, cdrom, filepath.Join(d.dir, "instances/disk2.config"), "--update", "--live", "--force").CombinedOutput(); err != nil {
		t.Fatalf("virsh change-media: %v: %s", err, b)
	}
	mediaChanged := time.Now()
	out = testenv.WaitConsole(t, console, "vmeta-guest: phase2-done", hotplugTimeout)
	t.Logf("hot-plug: attach to link %s (media change to link %s, seen on the console)", time.Since(hotStart).Round(time.Second), time.Since(mediaChanged).Round(time.Second))
	checkPhase2(t, parseReport(t, out))
	testenv.WaitConsole(t, console, testenv.GuestDone, time.Minute)
}

// report is what the guest printed.
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

var reLine = regexp.MustCompile(`(?m)^vmeta-guest: (\S+) ?(.*?)\r?$`)

func parseReport(t *testing.T, out string) *report {
	t.Helper()
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
			t.Errorf("status --output json: %v\n%s", err, js.String())
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

func checkPhase1(t *testing.T, in *model.Instance, r *report) {
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
	// without a serial is found by its address (0:0:2:0).
	type want struct {
		tags      []string
		encrypted bool
		dev       string
	}
	wants := map[string]*want{}
	for _, k := range in.Disks {
		w := &want{tags: []string{k.Tag}, encrypted: k.Encrypted}
		switch {
		case k.Serial != "":
			w.dev = r.deviceWithSerial(k.Serial)
		case k.Bus == "scsi":
			for n, props := range r.udev {
				if strings.HasSuffix(props["ID_PATH"], "-scsi-0:0:2:0") {
					w.dev = n
				}
			}
		case k.Bus == "sata":
			// udev's path_id names an AHCI device by its 1-based port:
			// ...-ata-<port+1>.0.
			port := k.Address[strings.LastIndex(k.Address, ":")+1:]
			for n, props := range r.udev {
				if strings.HasPrefix(n, "sd") && strings.Contains(props["ID_PATH"]+".", "-ata-"+strconv.Itoa(atoi(port)+1)+".") {
					w.dev = n
				}
			}
		}
		if k.Serial == "vol-sda" {
			w.tags = append(w.tags, slashTag)
		}
		if w.dev == "" {
			t.Errorf("disk %s (serial %q): not found in the guest", k.Name, k.Serial)
			for n, props := range r.udev {
				t.Logf("guest %s: ID_BUS=%s ID_TYPE=%s ID_PATH=%s ID_SERIAL=%s", n, props["ID_BUS"], props["ID_TYPE"], props["ID_PATH"], props["ID_SERIAL"])
			}
			continue
		}
		wants[k.Name] = w
		props := r.udev[w.dev]
		if got, want := props[udev.PropTags], udev.TagValue(w.tags); got != want {
			t.Errorf("%s (%s): %s=%q, want %q", w.dev, k.Name, udev.PropTags, got, want)
		}
		if got := props[udev.PropEncrypted] == "1"; got != w.encrypted {
			t.Errorf("%s (%s): %s=%q, encrypted in metadata: %v", w.dev, k.Name, udev.PropEncrypted, props[udev.PropEncrypted], w.encrypted)
		}
		for _, tag := range w.tags {
			link := udev.EncodeTag(tag)
			if got := r.links[link]; got != "/dev/"+w.dev {
				t.Errorf("/dev/disk/by-tag/%s -> %q, want /dev/%s", link, got, w.dev)
			}
			if !strings.Contains(props["DEVLINKS"], "/dev/disk/by-tag/"+link) {
				t.Errorf("%s DEVLINKS %q lack disk/by-tag/%s", w.dev, props["DEVLINKS"], link)
			}
		}
		t.Logf("disk %s (%s %s): guest %s %s=%q links %s", k.Name, model.MetadataBus(k.Bus), k.Address, w.dev, udev.PropTags, props[udev.PropTags], props["DEVLINKS"])
	}
	if len(r.links) != 6 {
		t.Errorf("links: %v, want the 6 disk tags' links", r.links)
	}
	for name, tag := range map[string]string{"vda": "squidcache", "sda": "oracledb", "sdb": "scsi-by-address", "sdc": "sata-by-port"} {
		if w := wants[name]; w != nil && r.find[tag] != "/dev/"+w.dev {
			t.Errorf("find --tag %s --type disk = %q, want /dev/%s", tag, r.find[tag], w.dev)
		}
	}
	if w := wants["vdb"]; w != nil && r.find["weird"] != "/dev/"+w.dev {
		t.Errorf("find --tag %q = %q, want /dev/%s", weirdTag, r.find["weird"], w.dev)
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

	// The share.
	if got := strings.Join(r.lines["findmnt"], "|"); got != shareTag+" /mnt/shares/"+shareTag+" virtiofs" {
		t.Errorf("findmnt: %q", got)
	}
	if got := strings.Join(r.lines["sharefile"], "|"); got != shareText {
		t.Errorf("file read from the share: %q", got)
	}
	if r.find["share"] != "/mnt/shares/"+shareTag {
		t.Errorf("find --tag %s --type share = %q", shareTag, r.find["share"])
	}

	// The status: every entry accounted for, the bad ones reported.
	if st := r.status; st == nil {
		t.Error("no status --output json")
	} else {
		problems := strings.Join(st.Problems, "\n")
		for _, want := range []string{`device type "gpu" is not one the agent knows`, `share "not-attached"`} {
			if !strings.Contains(problems, want) {
				t.Errorf("status problems lack %q:\n%s", want, problems)
			}
		}
		for _, ds := range st.Devices {
			ok := ds.Status == "matched" || ds.Status == "mounted" || ds.ShareTag == "not-attached"
			if !ok {
				t.Errorf("status: %+v", ds)
			}
		}
		if len(st.Devices) != 9 {
			t.Errorf("status lists %d devices, want 9 (5 disks, 2 NICs, 2 shares; the gpu entry is ignored)", len(st.Devices))
		}
		// How each disk was matched: the 36-character serial against
		// virtio's 20 bytes, the SCSI serial from VPD page 0x80, SCSI by
		// target/LUN, SATA by AHCI port.
		by := map[string]string{}
		for _, ds := range st.Devices {
			if ds.Type == "disk" && len(ds.Tags) > 0 {
				by[ds.Tags[0]] = strings.Join(ds.By, ", ")
			}
		}
		for tag, want := range map[string]string{
			"squidcache":      "serial " + longSer,
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

	// A second pass changes nothing; it exits 2 because of the problems.
	for _, l := range r.lines["apply2"] {
		t.Logf("second apply: %s", l)
	}
	apply2 := strings.Join(r.lines["apply2"], "\n")
	if !strings.Contains(apply2, `msg="nothing to change"`) || !strings.Contains(apply2, "rc=2") {
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

// checkPhase2: the hot-plugged disk, tagged by the new metadata, has its
// link and properties.
func checkPhase2(t *testing.T, r *report) {
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
	hl := r.lines["hotlink"]
	if len(hl) > 0 {
		t.Logf("hot-plug link in the guest: %s (phase 1 ended at %v s of guest uptime)", hl[0], r.lines["phase1-done"])
	}
	for _, l := range r.lines["agentlog"] {
		if strings.Contains(l, "medium") || strings.Contains(l, "metadata changed") || strings.Contains(l, "msg=applied") {
			t.Logf("agent: %s", l)
		}
	}
	for _, l := range r.lines["mem2"] {
		t.Logf("FIGURE daemon after hot-plug: %s", l)
	}
}
