package e2e

// End-to-end tests of `hostctl serve --virt libvirt` against the real
// libvirtd test/setup starts (qemu:///system, domains under TCG): the
// published device metadata against `virsh dumpxml` (read here with
// regular expressions, independently of hostctl/virt), tagged hot-plug,
// bad input, libvirtd going away, and a booted guest reaching the
// metadata service at 169.254.169.254.
//
// Every domain has a unique name and is destroyed and undefined by
// testenv.CleanupDomain (through virsh), every DHCP lease removed, also
// when a test fails.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/internal/testenv"
)

// Daemons started by the other tests of this package must not reach the
// host's libvirtd: `hostctl serve` defaults to --virt auto, which picks
// libvirt wherever its socket exists. The tests here ask for it
// explicitly.
func init() { os.Setenv("VMETA_VIRT", "none") }

var virtFlag struct {
	once sync.Once
	ok   bool
}

// requireVirtServe fails the test when the hostctl binary's serve has no
// --virt flag (daemon.Config.AddFlags registers VirtConfig's flags; see
// hostctl/daemon/virt.go).
func requireVirtServe(t *testing.T) {
	t.Helper()
	virtFlag.once.Do(func() {
		out, _ := exec.Command(hostctlBin, "serve", "-h").CombinedOutput()
		virtFlag.ok = bytes.Contains(out, []byte("-libvirt-uri"))
	})
	if !virtFlag.ok {
		t.Fatal("hostctl serve has no --virt/--libvirt-uri flags: hostctl/daemon does not register VirtConfig's flags")
	}
}

// startLibvirtDaemon starts `hostctl serve --virt libvirt` (TCG, small
// guests, reconciling on events only).
func startLibvirtDaemon(t *testing.T, uri string, extra ...string) *daemon {
	t.Helper()
	requireVirtServe(t)
	args := append([]string{"--virt", "libvirt", "--libvirt-uri", uri, "--domain-type", "qemu", "--domain-memory", "128",
		"--reconcile-interval", "0", "--detach-timeout", "2s"}, extra...)
	return startDaemon(t, daemonOptions{Args: args})
}

func virshCmd(t *testing.T, uri string, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(testenv.LookPath(t, "virsh"), append([]string{"-q", "-c", uri}, args...)...).CombinedOutput()
	return string(out), err
}

func mustVirsh(t *testing.T, uri string, args ...string) string {
	t.Helper()
	out, err := virshCmd(t, uri, args...)
	if err != nil {
		t.Fatalf("virsh %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out
}

// cleanupLease removes the default network's DHCP lease of mac when the
// test ends.
func cleanupLease(t *testing.T, uri, mac string) {
	t.Cleanup(func() {
		_, _ = virshCmd(t, uri, "net-update", "default", "delete", "ip-dhcp-host", "<host mac='"+mac+"'/>", "--live", "--config")
	})
}

func randomMAC() string {
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", rand.IntN(256), rand.IntN(256), rand.IntN(256))
}

// guestAddr is a loopback address of the test's own, from which the test
// plays the guest towards the metadata service.
func guestAddr() string {
	return fmt.Sprintf("127.77.%d.%d", rand.IntN(256), 1+rand.IntN(254))
}

// leaseIP is an address of the default network for a fixed lease, from
// the e2e tests' share.
func leaseIP(t *testing.T, uri string) string {
	t.Helper()
	return testenv.DefaultNetworkAddress(t, uri, testenv.AddrsE2E)
}

// The independent reading of `virsh dumpxml`: regular expressions over
// libvirt's own formatting, no encoding/xml, no code from hostctl.
var (
	xDisk    = regexp.MustCompile(`(?s)<disk [^>]*>.*?</disk>`)
	xNIC     = regexp.MustCompile(`(?s)<interface [^>]*>.*?</interface>`)
	xTarget  = regexp.MustCompile(`<target dev='([^']+)' bus='([^']+)'/>`)
	xSerial  = regexp.MustCompile(`<serial>([^<]*)</serial>`)
	xMAC     = regexp.MustCompile(`<mac address='([^']+)'/>`)
	xPCI     = regexp.MustCompile(`<address type='pci' domain='0x([0-9a-f]+)' bus='0x([0-9a-f]+)' slot='0x([0-9a-f]+)' function='0x([0-9a-f]+)'`)
	xDrive   = regexp.MustCompile(`<address type='drive' controller='(\d+)' bus='(\d+)' target='(\d+)' unit='(\d+)'/>`)
	xSource  = regexp.MustCompile(`<source file='([^']+)'`)
	xCDROM   = regexp.MustCompile(`device='cdrom'`)
	xDHCPHst = regexp.MustCompile(`<host mac='([^']+)' ip='([^']+)'/>`)
)

// xmlDevice is what the domain XML says about one device, in the form
// device metadata reports it.
type xmlDevice struct {
	Bus, Address, Serial, Target, Source string
}

func hexOf(dec string) string {
	n, err := strconv.ParseUint(dec, 10, 32)
	if err != nil {
		panic(err)
	}
	return strconv.FormatUint(n, 16)
}

func hexPad(h string, width int) string {
	n, err := strconv.ParseUint(h, 16, 32)
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf("%0*x", width, n)
}

// domainDevices reads `virsh dumpxml` (live, or --inactive): disks keyed
// by serial (and "cdrom" for the config drive), NICs by MAC.
func domainDevices(t *testing.T, uri, name string, live bool) (disks, nics map[string]xmlDevice) {
	t.Helper()
	args := []string{"dumpxml", name}
	if !live {
		args = append(args, "--inactive")
	}
	doc := mustVirsh(t, uri, args...)
	disks, nics = map[string]xmlDevice{}, map[string]xmlDevice{}
	for _, b := range xDisk.FindAllString(doc, -1) {
		tg := xTarget.FindStringSubmatch(b)
		if tg == nil {
			t.Fatalf("disk without target:\n%s", b)
		}
		d := xmlDevice{Target: tg[1]}
		if s := xSource.FindStringSubmatch(b); s != nil {
			d.Source = s[1]
		}
		if m := xPCI.FindStringSubmatch(b); m != nil {
			d.Bus, d.Address = "pci", hexPad(m[1], 4)+":"+hexPad(m[2], 2)+":"+hexPad(m[3], 2)+"."+hexPad(m[4], 1)
		} else if m := xDrive.FindStringSubmatch(b); m != nil {
			d.Bus, d.Address = "scsi", hexOf(m[1])+":"+hexOf(m[2])+":"+hexOf(m[3])+":"+hexOf(m[4])
		}
		key := tg[1]
		if s := xSerial.FindStringSubmatch(b); s != nil {
			d.Serial, key = s[1], s[1]
		}
		if xCDROM.MatchString(b) {
			key = "cdrom"
		}
		disks[key] = d
	}
	for _, b := range xNIC.FindAllString(doc, -1) {
		m := xMAC.FindStringSubmatch(b)
		if m == nil {
			t.Fatalf("interface without MAC:\n%s", b)
		}
		d := xmlDevice{Bus: "pci"}
		if a := xPCI.FindStringSubmatch(b); a != nil {
			d.Address = hexPad(a[1], 4) + ":" + hexPad(a[2], 2) + ":" + hexPad(a[3], 2) + "." + hexPad(a[4], 1)
		}
		nics[m[1]] = d
	}
	return disks, nics
}

// mdDevice is one entry of meta_data.json's devices.
type mdDevice struct {
	Type    string   `json:"type"`
	Bus     string   `json:"bus"`
	Address string   `json:"address"`
	MAC     string   `json:"mac"`
	Serial  string   `json:"serial"`
	Tags    []string `json:"tags"`
}

func devicesFrom(t *testing.T, metaData []byte) map[string]mdDevice {
	t.Helper()
	var md struct {
		Devices []mdDevice `json:"devices"`
	}
	if err := json.Unmarshal(metaData, &md); err != nil {
		t.Fatalf("meta_data.json: %v\n%s", err, metaData)
	}
	out := map[string]mdDevice{}
	for _, d := range md.Devices {
		if len(d.Tags) != 1 {
			continue
		}
		out[d.Tags[0]] = d
	}
	return out
}

// publishedDevices GETs the instance's meta_data.json from its address,
// as the guest would, and returns its tagged devices by tag.
func publishedDevices(t *testing.T, d *daemon, from string) map[string]mdDevice {
	t.Helper()
	r := getFrom(t, from, d.URL()+"/openstack/latest/meta_data.json")
	if r.status != http.StatusOK {
		t.Fatalf("GET meta_data.json from %s: %d %s", from, r.status, r.body)
	}
	return devicesFrom(t, r.body)
}

// driveDevices reads the config drive with configdrive.Read.
func driveDevices(t *testing.T, path string) map[string]mdDevice {
	t.Helper()
	tree, label, err := configdrive.Read(path)
	if err != nil {
		t.Fatalf("config drive %s: %v", path, err)
	}
	if !strings.EqualFold(label, "config-2") {
		t.Errorf("config drive label %q", label)
	}
	md, ok := tree.Get("openstack/latest/meta_data.json")
	if !ok {
		t.Fatal("config drive lacks openstack/latest/meta_data.json")
	}
	return devicesFrom(t, md)
}

// wantDevice describes a tagged device of the spec: a disk by serial or a
// NIC by MAC.
type wantDevice struct{ tag, serial, mac string }

// checkAgainstXML checks that the published devices are exactly want,
// each at the bus and address (and with the serial or MAC) the domain XML
// gives it.
func checkAgainstXML(t *testing.T, where string, got map[string]mdDevice, want []wantDevice, disks, nics map[string]xmlDevice) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d tagged devices published, want %d: %+v", where, len(got), len(want), got)
	}
	for _, w := range want {
		g, ok := got[w.tag]
		if !ok {
			t.Errorf("%s: no device tagged %q", where, w.tag)
			continue
		}
		var x xmlDevice
		if w.mac != "" {
			if x, ok = nics[w.mac]; !ok || g.Type != "nic" || g.MAC != w.mac {
				t.Errorf("%s: %q: published %+v; the domain has NIC %s: %t", where, w.tag, g, w.mac, ok)
				continue
			}
		} else if x, ok = disks[w.serial]; !ok || g.Type != "disk" || g.Serial != w.serial {
			t.Errorf("%s: %q: published %+v; the domain has a disk with serial %s: %t", where, w.tag, g, w.serial, ok)
			continue
		}
		if x.Address == "" || g.Bus != x.Bus || g.Address != x.Address {
			t.Errorf("%s: %q: published bus %s address %s, virsh dumpxml says %s %s", where, w.tag, g.Bus, g.Address, x.Bus, x.Address)
		}
	}
}

// TestLibvirtDevices applies an instance with tagged virtio and SCSI disks
// and tagged NICs through `hostctl serve --virt libvirt`, and checks the
// published devices (fetched from the instance's address, and read from
// its config drive) against `virsh dumpxml`; then tagged attach and detach
// of disks and NICs, shut off and running; then delete.
func TestLibvirtDevices(t *testing.T) {
	t.Parallel()
	uri := testenv.RequireLibvirt(t)
	d := startLibvirtDaemon(t, uri)
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	addr := guestAddr()
	mac1, mac2, hotMAC := randomMAC(), randomMAC(), randomMAC()
	ip := leaseIP(t, uri)
	for _, m := range []string{mac1, mac2, hotMAC} {
		cleanupLease(t, uri, m)
	}
	spec := fmt.Sprintf(`name: %s
addresses: [%s]
disks:
  - {name: vda, size: 16M, tag: root, serial: root-1}
  - {name: vdb, size: 8M, tag: squidcache, serial: squid-1}
  - {name: sda, bus: scsi, size: 8M, tag: oracledb, serial: ora-1}
  - {name: sdb, bus: scsi, size: 8M, tag: archive, serial: arch-1}
  - {name: sdc, bus: scsi, size: 8M, serial: untagged-1}
nics:
  - {mac: "%s", tag: nfvfunc1}
  - {mac: "%s", tag: nfvfunc2, ips: [{address: %s/24, gateway: 192.168.122.1}]}
`, name, addr, mac1, mac2, ip)
	want := []wantDevice{
		{tag: "root", serial: "root-1"}, {tag: "squidcache", serial: "squid-1"},
		{tag: "oracledb", serial: "ora-1"}, {tag: "archive", serial: "arch-1"},
		{tag: "nfvfunc1", mac: mac1}, {tag: "nfvfunc2", mac: mac2},
	}

	var inst struct {
		instanceJSON
		State string `json:"state"`
	}
	decodeJSON(t, d.MustCtl("instance", "apply", "-f", writeSpec(t, spec), "--output", "json").stdout, &inst)
	if inst.State != "shutoff" {
		t.Errorf("state after apply %q, want shutoff", inst.State)
	}
	if inst.ConfigDrive != filepath.Join(d.DataDir, "instances", name, "disk.config") {
		t.Errorf("config drive %q", inst.ConfigDrive)
	}
	disks, nics := domainDevices(t, uri, name, false)
	checkAgainstXML(t, "after apply, metadata service", publishedDevices(t, d, addr), want, disks, nics)
	checkAgainstXML(t, "after apply, config drive", driveDevices(t, inst.ConfigDrive), want, disks, nics)
	// The disks are hostctl's images in the data directory; the config
	// drive is the domain's cdrom.
	for serial, x := range disks {
		if serial == "cdrom" {
			if x.Source != inst.ConfigDrive {
				t.Errorf("cdrom source %s, want the config drive %s", x.Source, inst.ConfigDrive)
			}
			continue
		}
		if want := filepath.Join(d.DataDir, "instances", name, "disk-"+x.Target+".qcow2"); x.Source != want {
			t.Errorf("disk %s: source %s, want %s", x.Target, x.Source, want)
		}
		if _, err := os.Stat(x.Source); err != nil {
			t.Errorf("disk %s: %v", x.Target, err)
		}
	}
	// Fixed DHCP lease: the static address of nfvfunc2, also added to the
	// instance's addresses so the metadata service knows it before boot;
	// in the network's definition now, live from the start (below).
	net := mustVirsh(t, uri, "net-dumpxml", "--inactive", "default")
	if !strings.Contains(net, "<host mac='"+mac2+"' ip='"+ip+"'/>") {
		t.Errorf("no DHCP lease %s -> %s in:\n%s", mac2, ip, net)
	}
	if strings.Contains(net, mac1) {
		t.Errorf("a lease for %s, which has only a loopback address to take", mac1)
	}
	if !strings.Contains(strings.Join(inst.Spec.Addresses, ","), ip) {
		t.Errorf("addresses %v lack the static %s", inst.Spec.Addresses, ip)
	}

	// Attach a tagged SCSI disk to the shut-off domain (persistent
	// configuration), then detach it again.
	r := d.MustCtl("instance", "attach-disk", name, "--tag", "hotdisk", "--bus", "scsi", "--size", "8M", "--serial", "hot-1")
	if !strings.Contains(r.stdout, "hotdisk") {
		t.Errorf("attach-disk output lacks the new disk:\n%s", r.stdout)
	}
	want = append(want, wantDevice{tag: "hotdisk", serial: "hot-1"})
	disks, nics = domainDevices(t, uri, name, false)
	checkAgainstXML(t, "after attach-disk, metadata service", publishedDevices(t, d, addr), want, disks, nics)
	checkAgainstXML(t, "after attach-disk, config drive", driveDevices(t, inst.ConfigDrive), want, disks, nics)
	hotImage := disks["hot-1"].Source
	d.MustCtl("instance", "detach-disk", name, "--tag", "hotdisk")
	want = want[:len(want)-1]
	disks, nics = domainDevices(t, uri, name, false)
	if _, ok := disks["hot-1"]; ok {
		t.Error("detached disk still in the domain")
	}
	checkAgainstXML(t, "after detach-disk, metadata service", publishedDevices(t, d, addr), want, disks, nics)
	checkAgainstXML(t, "after detach-disk, config drive", driveDevices(t, inst.ConfigDrive), want, disks, nics)
	if _, err := os.Stat(hotImage); !os.IsNotExist(err) {
		t.Errorf("detached disk's image %s: %v", hotImage, err)
	}

	// Start it (TCG; no OS needed: SCSI disks and NICs hot-plug without
	// the guest's help, a SCSI disk also leaves without it).
	var started struct {
		State string `json:"state"`
	}
	decodeJSON(t, d.MustCtl("instance", "start", name, "--output", "json").stdout, &started)
	if started.State != "running" {
		t.Fatalf("state after start %q", started.State)
	}
	if live := mustVirsh(t, uri, "net-dumpxml", "default"); !strings.Contains(live, "<host mac='"+mac2+"' ip='"+ip+"'/>") {
		t.Errorf("the running network lacks the lease %s -> %s after the start:\n%s", mac2, ip, live)
	}
	d.MustCtl("instance", "attach-disk", name, "--tag", "livedisk", "--bus", "scsi", "--size", "8M", "--serial", "live-1")
	d.MustCtl("instance", "attach-nic", name, "--tag", "hotnic", "--mac", hotMAC)
	want = append(want, wantDevice{tag: "livedisk", serial: "live-1"}, wantDevice{tag: "hotnic", mac: hotMAC})
	for _, live := range []bool{true, false} {
		disks, nics = domainDevices(t, uri, name, live)
		checkAgainstXML(t, fmt.Sprintf("after live attach (live XML %t), metadata service", live), publishedDevices(t, d, addr), want, disks, nics)
	}
	checkAgainstXML(t, "after live attach, config drive", driveDevices(t, inst.ConfigDrive), want, disks, nics)
	d.MustCtl("instance", "detach-disk", name, "--tag", "livedisk")
	want = want[:len(want)-2]
	want = append(want, wantDevice{tag: "hotnic", mac: hotMAC})
	for _, live := range []bool{true, false} {
		disks, nics = domainDevices(t, uri, name, live)
		if _, ok := disks["live-1"]; ok {
			t.Errorf("live XML %t: detached disk still there", live)
		}
		checkAgainstXML(t, fmt.Sprintf("after live detach (live XML %t)", live), publishedDevices(t, d, addr), want, disks, nics)
	}

	var stopped struct {
		State    string   `json:"state"`
		Warnings []string `json:"warnings"`
	}
	decodeJSON(t, d.MustCtl("instance", "stop", name, "--timeout", "1s", "--output", "json").stdout, &stopped)
	if stopped.State != "shutoff" {
		t.Errorf("state after stop %q", stopped.State)
	}
	d.MustCtl("instance", "detach-nic", name, "--tag", "hotnic")
	want = want[:len(want)-1]
	disks, nics = domainDevices(t, uri, name, false)
	checkAgainstXML(t, "after detach-nic", publishedDevices(t, d, addr), want, disks, nics)

	// Delete: the domain, the lease, the files and the record go.
	d.MustCtl("instance", "delete", name)
	if out := mustVirsh(t, uri, "list", "--all", "--name"); strings.Contains(out, name) {
		t.Errorf("domain still defined after delete")
	}
	if strings.Contains(mustVirsh(t, uri, "net-dumpxml", "default"), mac2) {
		t.Errorf("lease of %s still on the network after delete", mac2)
	}
	if _, err := os.Stat(filepath.Join(d.DataDir, "instances", name)); !os.IsNotExist(err) {
		t.Errorf("instance directory after delete: %v", err)
	}
	if r := getFrom(t, addr, d.URL()+"/openstack/latest/meta_data.json"); r.status != http.StatusNotFound {
		t.Errorf("metadata after delete: %d", r.status)
	}
}

// libvirtSnapshot is what a refused request must not change.
type libvirtSnapshot struct {
	domains, leases, instances, files string
}

func takeLibvirtSnapshot(t *testing.T, d *daemon, uri, name, mac string) libvirtSnapshot {
	t.Helper()
	var s libvirtSnapshot
	out := mustVirsh(t, uri, "list", "--all", "--name")
	for _, l := range strings.Fields(out) {
		if l == name {
			s.domains += l + "\n"
		}
	}
	for _, m := range xDHCPHst.FindAllStringSubmatch(mustVirsh(t, uri, "net-dumpxml", "default"), -1) {
		if m[1] == mac { // other tests change the network concurrently
			s.leases += m[0] + "\n"
		}
	}
	s.instances = d.MustCtl("instance", "list", "--output", "json").stdout
	filepath.Walk(d.DataDir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && strings.Contains(p, string(filepath.Separator)+"instances") {
			s.files += p + "\n"
		}
		return nil
	})
	return s
}

// TestLibvirtBadInput: each refused spec or request is a clear error and
// creates nothing — no domain, no lease, no store record, no file.
func TestLibvirtBadInput(t *testing.T) {
	t.Parallel()
	uri := testenv.RequireLibvirt(t)
	d := startLibvirtDaemon(t, uri)
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	mac := randomMAC()
	cleanupLease(t, uri, mac)
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(d.DataDir, "instances"), 0o755); err != nil {
		t.Fatal(err)
	}
	linked := name + "-linked"
	testenv.CleanupDomain(t, uri, linked)
	if err := os.Symlink(outside, filepath.Join(d.DataDir, "instances", linked)); err != nil {
		t.Fatal(err)
	}
	// An instance to attach to.
	good := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, good)
	d.Apply(fmt.Sprintf("name: %s\ndisks: [{name: vda, size: 8M, tag: root}]\nnics: [{mac: \"%s\", tag: front}]\n", good, mac))

	cases := []struct {
		name string
		args []string // a client command; empty: apply spec
		spec string
		says string
	}{
		{"unknown bus", nil, "name: " + name + "\ndisks: [{name: vda, bus: floppy, size: 8M}]\n", "disks[0].bus"},
		{"IDE on q35", nil, "name: " + name + "\ndisks: [{name: hda, bus: ide, size: 8M}]\n", "q35 has no IDE controller"},
		{"bad tag on a PCI device", nil, "name: " + name + "\npci_devices: [{address: \"0000:03:00.0\", tag: a/b}]\n", "pci_devices[0].tag"},
		{"two NICs with one tag", nil, "name: " + name + "\nnics: [{mac: \"52:54:00:01:00:01\", tag: x}, {mac: \"52:54:00:01:00:02\", tag: x}]\n", "nics[1].tag"},
		{"disk path outside the data directory", nil, "name: " + linked + "\ndisks: [{name: vda, size: 8M}]\n", "outside the data directory"},
		{"image outside the image directory", nil, "name: " + name + "\nimage: ../../etc/passwd\ndisks: [{name: vda}]\n", "image"},
		{"disk without size or image", nil, "name: " + name + "\ndisks: [{name: vda}]\n", "disks[0].size"},
		{"name libvirt would reject", nil, "name: " + name + "/x\n", "name"},
		{"name too long for a domain", nil, "name: " + name + strings.Repeat("x", 60) + "\n", "name"},
		{"serial QEMU would truncate", nil, "name: " + name + "\ndisks: [{name: vda, size: 8M, serial: abcdefghijklmnopqrstu}]\n", "truncates"},
		{"attach: tag already used", []string{"instance", "attach-disk", good, "--tag", "root"}, "", "unique"},
		{"attach: unknown bus", []string{"instance", "attach-disk", good, "--tag", "x", "--bus", "floppy"}, "", "unknown bus"},
		{"attach-nic: tag already used", []string{"instance", "attach-nic", good, "--tag", "front"}, "", "nics[1].tag"},
		{"attach: --live on a shut-off domain", []string{"instance", "attach-disk", good, "--tag", "x", "--live"}, "", "--live needs a running domain"},
		{"detach: no such tag", []string{"instance", "detach-disk", good, "--tag", "nope"}, "", "no disk tagged \"nope\""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := takeLibvirtSnapshot(t, d, uri, name, mac)
			args := tc.args
			if args == nil {
				args = []string{"instance", "apply", "-f", writeSpec(t, tc.spec)}
			}
			r := d.Ctl(args...)
			if r.code == 0 || !strings.Contains(r.stderr, tc.says) {
				t.Fatalf("want a failure mentioning %q; got %s", tc.says, r)
			}
			t.Logf("refused: %s", strings.TrimSpace(r.stderr))
			after := takeLibvirtSnapshot(t, d, uri, name, mac)
			if before != after {
				t.Errorf("a refused request changed something:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
	if out := mustVirsh(t, uri, "list", "--all", "--name"); strings.Contains(out, linked) {
		t.Errorf("domain %s was defined", linked)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("files were written outside the data directory: %v", entries)
	}
}

// TestLibvirtUnreachable: a daemon told to use a libvirtd that is not
// there refuses to start, naming the socket; with --virt auto it runs
// without a hypervisor instead.
func TestLibvirtUnreachable(t *testing.T) {
	t.Parallel()
	requireVirtServe(t)
	sock := filepath.Join(t.TempDir(), "no-libvirt-sock")
	uri := "qemu:///system?socket=" + sock
	dir := t.TempDir()
	sockDir, err := os.MkdirTemp("", "vmeta-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	r := hostctl(t, nil, "serve", "--virt", "libvirt", "--libvirt-uri", uri, "--data-dir", dir,
		"--socket", filepath.Join(sockDir, "s.sock"), "--metadata-listen", "127.0.0.1:0")
	if r.code == 0 || !strings.Contains(r.stderr, "libvirtd at "+sock+" is unreachable") {
		t.Fatalf("want a start-up failure naming the socket; got %s", r)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "instances")); len(entries) != 0 {
		t.Errorf("instances created: %v", entries)
	}
	d := startDaemon(t, daemonOptions{Args: []string{"--virt", "auto", "--libvirt-uri", uri}})
	d.Apply("name: auto-none\naddresses: [127.0.0.1]\ndisks: [{name: vda, tag: root, address: \"0000:00:05.0\"}]\n")
	var inst struct {
		State   string     `json:"state"`
		Devices []mdDevice `json:"devices"`
	}
	decodeJSON(t, d.MustCtl("instance", "show", "auto-none", "--output", "json").stdout, &inst)
	if inst.State != "" || len(inst.Devices) != 1 || inst.Devices[0].Address != "0000:00:05.0" {
		t.Errorf("--virt auto without a socket: %+v, want the hypervisor-less mode", inst)
	}
	if r := d.Ctl("instance", "start", "auto-none"); r.code == 0 || !strings.Contains(r.stderr, "no hypervisor") {
		t.Errorf("start without a hypervisor: %s", r)
	}
}

// startLibvirtd starts libvirtd (if it does not run) and waits until it
// answers.
func startLibvirtd(t *testing.T, uri string) {
	t.Helper()
	if testenv.LibvirtdPid() == 0 {
		if out, err := exec.Command(testenv.LookPath(t, "libvirtd"), "-d").CombinedOutput(); err != nil {
			t.Errorf("libvirtd -d: %v: %s", err, out)
			return
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := virshCmd(t, uri, "version"); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("libvirtd does not answer 30s after start")
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestLibvirtdRestart kills libvirtd under a running hostctl and starts it
// again: while it is down, the store keeps serving (list, show, metadata)
// and changes fail cleanly; afterwards hostctl has reconnected by itself,
// its event subscriptions are back (a domain undefined behind its back is
// marked missing), and nothing in the store was lost.
func TestLibvirtdRestart(t *testing.T) {
	uri := testenv.RequireLibvirtExclusive(t)
	if os.Getenv(testenv.LibvirtSocketEnv) != "" {
		t.Skip("this test restarts the system libvirtd; a custom socket is set")
	}
	pid := testenv.LibvirtdPid()
	if pid == 0 {
		testenv.Require(t, "restartable libvirtd", testenv.LibvirtdPidFile+" names no running libvirtd (start it with test/setup)")
	}
	t.Cleanup(func() { startLibvirtd(t, uri) })
	d := startLibvirtDaemon(t, uri)
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	addr := guestAddr()
	spec := fmt.Sprintf("name: %s\naddresses: [%s]\ndisks: [{name: vda, size: 8M, tag: root, serial: r1}, {name: sda, bus: scsi, size: 8M, tag: db, serial: d1}]\n", name, addr)
	d.Apply(spec)
	before := d.MustCtl("instance", "show", name, "--output", "json").stdout
	beforeMD := publishedDevices(t, d, addr)

	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("kill libvirtd: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); testenv.ProcessRunning(pid); {
		if time.Now().After(deadline) {
			t.Fatal("libvirtd still runs 30s after SIGTERM")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var down struct {
		State    string `json:"state"`
		Revision int64  `json:"revision"`
	}
	decodeJSON(t, d.MustCtl("instance", "show", name, "--output", "json").stdout, &down)
	if down.State != "unknown" {
		t.Errorf("state while libvirtd is down: %q, want unknown", down.State)
	}
	if got := publishedDevices(t, d, addr); fmt.Sprint(got) != fmt.Sprint(beforeMD) {
		t.Errorf("metadata while libvirtd is down: %v, want %v", got, beforeMD)
	}
	r := d.Ctl("instance", "attach-disk", name, "--tag", "x", "--bus", "scsi", "--size", "8M")
	if r.code == 0 || !strings.Contains(r.stderr, "unreachable") {
		t.Errorf("attach while libvirtd is down: want an unreachable error; got %s", r)
	}
	r = d.Ctl("instance", "apply", "-f", writeSpec(t, strings.Replace(spec, "tag: db", "tag: db2", 1)))
	if r.code == 0 || !strings.Contains(r.stderr, "unreachable") {
		t.Errorf("apply while libvirtd is down: want an unreachable error; got %s", r)
	}

	t.Logf("libvirtd (pid %d) killed; while it was down: show, metadata served, changes refused", pid)
	restarted := time.Now()
	startLibvirtd(t, uri)
	t.Logf("libvirtd started again (pid %d)", testenv.LibvirtdPid())
	// hostctl reconnects on its own: a change goes through again.
	var after struct {
		State    string `json:"state"`
		Revision int64  `json:"revision"`
	}
	deadline := time.Now().Add(time.Minute)
	for {
		decodeJSON(t, d.MustCtl("instance", "show", name, "--output", "json").stdout, &after)
		if after.State == "shutoff" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state %q a minute after libvirtd came back", after.State)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("hostctl sees the domain again %s after libvirtd was started", time.Since(restarted).Round(time.Millisecond))
	if after.Revision != down.Revision {
		t.Errorf("revision %d after the restart, was %d", after.Revision, down.Revision)
	}
	var now, was struct {
		Spec    json.RawMessage `json:"spec"`
		Devices json.RawMessage `json:"devices"`
	}
	decodeJSON(t, before, &was)
	decodeJSON(t, d.MustCtl("instance", "show", name, "--output", "json").stdout, &now)
	if string(now.Spec) != string(was.Spec) || string(now.Devices) != string(was.Devices) {
		t.Errorf("the store changed across the restart:\nbefore %s\nafter  %s", was.Spec, now.Spec)
	}
	retry(t, "attach-disk after the reconnect", func() result {
		return d.Ctl("instance", "attach-disk", name, "--tag", "hot", "--bus", "scsi", "--size", "8M", "--serial", "h1")
	})
	// Events flow again: a domain undefined behind hostctl's back is marked.
	mustVirsh(t, uri, "undefine", name)
	deadline = time.Now().Add(30 * time.Second)
	for {
		var st struct {
			State string `json:"state"`
		}
		decodeJSON(t, d.MustCtl("instance", "show", name, "--output", "json").stdout, &st)
		if st.State == "missing" && strings.Contains(d.Log(), "instance marked missing") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not marked missing after the domain was undefined (state %q); daemon log:\n%s", st.State, d.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.MustCtl("instance", "delete", name)
}

// retry runs a command until it succeeds (libvirtd may still be settling
// right after it answers) or 30s pass.
func retry(t *testing.T, what string, f func() result) result {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := f()
		if r.code == 0 {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, r)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestLibvirtReconcile: devices removed behind hostctl's back (virsh
// detach-disk --config, a device-removed event from a live detach) leave
// the published metadata.
func TestLibvirtReconcile(t *testing.T) {
	t.Parallel()
	uri := testenv.RequireLibvirt(t)
	d := startLibvirtDaemon(t, uri, "--reconcile-interval", "500ms")
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	addr := guestAddr()
	d.Apply(fmt.Sprintf("name: %s\naddresses: [%s]\ndisks: [{name: vda, size: 8M, tag: root, serial: r1}, {name: sda, bus: scsi, size: 8M, tag: db, serial: d1}, {name: sdb, bus: scsi, size: 8M, tag: logs, serial: l1}]\n", name, addr))
	waitGone := func(tag string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			if _, ok := publishedDevices(t, d, addr)[tag]; !ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still in the metadata 30s after its removal", tag)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The persistent definition changed, no event: the periodic pass.
	mustVirsh(t, uri, "detach-disk", name, "sda", "--config")
	waitGone("db")
	// A live detach sends device-removed.
	d.MustCtl("instance", "start", name)
	mustVirsh(t, uri, "detach-disk", name, "sdb", "--live", "--config")
	waitGone("logs")
	if got := publishedDevices(t, d, addr); len(got) != 1 {
		t.Errorf("metadata after the removals: %v, want only root", got)
	}
}

// TestGuestReachesMetadata boots a Linux guest (Debian's kernel and a
// busybox initramfs, TCG) on a domain hostctl defined, after `hostctl
// network setup-metadata` made 169.254.169.254:80 on virbr0 reach the
// metadata listener — by a DNAT rule to the listener on the bridge
// address, and by the address on the bridge itself: the guest, with the
// static address of its spec, fetches its own meta_data.json from
// http://169.254.169.254/ and finds its config drive on the cdrom.
func TestGuestReachesMetadata(t *testing.T) {
	t.Parallel()
	uri := testenv.RequireLibvirt(t)
	testenv.LockMetadataRoute(t)
	testenv.LookPath(t, "iptables")
	testenv.LookPath(t, "ip")
	if _, err := net.InterfaceByName("virbr0"); err != nil {
		testenv.Require(t, "libvirt's default network", "no virbr0 bridge: "+err.Error())
	}
	t.Run("dnat", func(t *testing.T) {
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		listen := net.JoinHostPort("192.168.122.1", strconv.Itoa(port))
		guestFetchesMetadata(t, uri, listen, []string{"network", "setup-metadata", "--to", listen}, "--to-destination "+listen,
			func() bool {
				out, _ := exec.Command("iptables", "-w", "-t", "nat", "-S", "PREROUTING").CombinedOutput()
				return strings.Contains(string(out), listen)
			})
	})
	t.Run("address", func(t *testing.T) {
		if ln, err := net.Listen("tcp", "0.0.0.0:80"); err != nil {
			t.Skipf("port 80 is taken on this host (%v); the address mode needs it", err)
		} else {
			ln.Close()
		}
		guestFetchesMetadata(t, uri, "169.254.169.254:80", []string{"network", "setup-metadata", "--mode", "address"}, "ip addr add 169.254.169.254/32 dev virbr0",
			func() bool {
				out, _ := exec.Command("ip", "-4", "-o", "addr", "show", "dev", "virbr0").CombinedOutput()
				return strings.Contains(string(out), "169.254.169.254")
			})
	})
}

// guestFetchesMetadata runs setup (a `hostctl network setup-metadata`
// command; dryRun is a line its --dry-run must print, left tells whether
// its change is still on the host), a daemon whose metadata service
// listens on listen, and a guest that fetches its metadata from
// 169.254.169.254:80.
func guestFetchesMetadata(t *testing.T, uri, listen string, setup []string, dryRun string, left func() bool) {
	ip := leaseIP(t, uri)
	mac := randomMAC()
	cleanupLease(t, uri, mac)
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)

	script := fmt.Sprintf(`ip link set eth0 up
ip addr add %s/24 dev eth0
ip route add default via 192.168.122.1
# HTTP by hand: busybox-static's wget crashes in this initramfs.
for i in 1 2 3 4 5 6 7 8 9 10; do
	md=$(printf 'GET /openstack/latest/meta_data.json HTTP/1.0\r\nHost: 169.254.169.254\r\n\r\n' | nc -w 5 169.254.169.254 80 | tr -d '\r' | tail -n 1)
	[ -n "$md" ] && break
	sleep 1
done
echo "vmeta-guest: metadata $md"
echo "vmeta-guest: drive $(grep -c -a '"uuid"' /dev/sr0)"`, ip)
	g := testenv.BuildGuest(t, t.TempDir(), script)

	// Start from a clean host: a run that was killed before its cleanup
	// (this machine is reused) may have left the change in place.
	if left() {
		if r := hostctl(t, nil, append(setup, "--remove")...); r.code != 0 || left() {
			t.Fatalf("removing a leftover setup-metadata change: %s", r)
		}
	}
	t.Cleanup(func() {
		if r := hostctl(t, nil, append(setup, "--remove")...); r.code != 0 {
			t.Errorf("setup-metadata --remove: %s", r)
		}
		if left() {
			t.Errorf("setup-metadata --remove left its change on the host")
		}
	})
	r := hostctl(t, nil, append(setup, "--dry-run")...)
	if r.code != 0 || !strings.Contains(r.stdout, dryRun) {
		t.Fatalf("dry run: want %q; got %s", dryRun, r)
	}
	if left() {
		t.Fatal("--dry-run changed the host")
	}
	r = hostctl(t, nil, setup...)
	if r.code != 0 {
		t.Fatalf("setup-metadata: %s", r)
	}
	t.Logf("setup-metadata:\n%s", r.stdout)
	if r := hostctl(t, nil, setup...); r.code != 0 || !strings.Contains(r.stdout, "already in place") {
		t.Errorf("setup-metadata is not idempotent: %s", r)
	}

	requireVirtServe(t)
	// The later --metadata-listen wins over the loopback one startDaemon
	// passes: the service listens where setup-metadata sends the guests.
	d := startDaemon(t, daemonOptions{Args: []string{"--virt", "libvirt", "--libvirt-uri", uri, "--domain-memory", "256",
		"--reconcile-interval", "0", "--metadata-listen", listen,
		"--domain-kernel", g.Kernel, "--domain-initrd", g.Initrd, "--domain-cmdline", g.Cmdline}})
	var inst instanceJSON
	spec := fmt.Sprintf("name: %s\nnics: [{mac: \"%s\", tag: uplink, ips: [{address: %s/24, gateway: 192.168.122.1}]}]\n", name, mac, ip)
	decodeJSON(t, d.MustCtl("instance", "apply", "-f", writeSpec(t, spec), "--output", "json").stdout, &inst)
	d.MustCtl("instance", "start", name)
	console := filepath.Join(d.DataDir, "instances", name, "console.log")
	start := time.Now()
	log := testenv.WaitConsole(t, console, testenv.GuestDone, 4*time.Minute)
	t.Logf("guest done after %s", time.Since(start).Round(time.Second))
	m := regexp.MustCompile(`vmeta-guest: metadata (.*)`).FindStringSubmatch(log)
	if m == nil || !strings.Contains(m[1], `"uuid":"`+inst.Spec.UUID+`"`) || !strings.Contains(m[1], `"uplink"`) {
		t.Errorf("the guest did not get its meta_data.json from 169.254.169.254; console:\n%s", log)
	}
	if !regexp.MustCompile(`vmeta-guest: drive [1-9]`).MatchString(log) {
		t.Errorf("the guest's cdrom does not hold its config drive; console:\n%s", log)
	}
	d.MustCtl("instance", "stop", name, "--timeout", "1s")
	d.MustCtl("instance", "delete", name)
}
