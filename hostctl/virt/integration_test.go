package virt

// Integration tests against the real libvirtd that test/setup starts
// (qemu:///system, domains under TCG). Every domain has a unique name and is
// destroyed and undefined by testenv.CleanupDomain, through virsh, also
// when a test fails.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/testenv"
)

// testDataDir is a data directory with qcow2 images made by qemu-img for
// the named disks, a config drive stand-in and a share directory.
type testDataDir struct {
	dir   string
	host  Host
	share string
}

func newTestDataDir(t *testing.T, disks ...string) *testDataDir {
	t.Helper()
	qemuImg := testenv.LookPath(t, "qemu-img")
	d := &testDataDir{dir: t.TempDir()}
	inst := filepath.Join(d.dir, "instances")
	d.share = filepath.Join(d.dir, "shares", "data")
	for _, p := range []string{inst, d.share} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d.host = Host{DataDir: d.dir, Disks: map[string]DiskSource{}, SerialLog: "instances/console.log"}
	for _, name := range disks {
		d.addImage(t, qemuImg, name)
	}
	// Any file serves as the cdrom's medium; the guest never reads it.
	if err := os.WriteFile(filepath.Join(inst, "disk.config"), make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	d.host.ConfigDrive = "instances/disk.config"
	return d
}

func (d *testDataDir) addImage(t *testing.T, qemuImg, name string) {
	t.Helper()
	p := filepath.Join("instances", name+".qcow2")
	if out, err := exec.Command(qemuImg, "create", "-q", "-f", "qcow2", filepath.Join(d.dir, p), "16M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create %s: %v: %s", p, err, out)
	}
	d.host.Disks[name] = DiskSource{Path: p}
}

func randomUUID(t testing.TB) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// domainDevices returns the live or inactive XML of domain name and
// the devices parsed from it.
func domainDevices(t *testing.T, ctx context.Context, c *Conn, name string, live bool) ([]byte, *Devices) {
	t.Helper()
	doc, err := c.XML(ctx, name, live)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := ParseDevices(doc)
	if err != nil {
		t.Fatal(err)
	}
	return doc, devs
}

func connect(t *testing.T, uri string, opts ConnOptions) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(testLogWriter{t}, nil))
	}
	c, err := Connect(ctx, uri, opts)
	if err != nil {
		t.Fatalf("Connect(%s): %v", uri, err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// virsh runs virsh against uri and returns its output.
func virsh(t *testing.T, uri string, args ...string) string {
	t.Helper()
	bin := testenv.LookPath(t, "virsh")
	out, err := exec.Command(bin, append([]string{"-q", "-c", uri}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("virsh %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The independent reading of `virsh dumpxml`: regular expressions over
// libvirt's own formatting, no encoding/xml, no code from this package.
var (
	reDiskBlock  = regexp.MustCompile(`(?s)<disk [^>]*>.*?</disk>`)
	reNICBlock   = regexp.MustCompile(`(?s)<interface [^>]*>.*?</interface>`)
	reFSBlock    = regexp.MustCompile(`(?s)<filesystem [^>]*>.*?</filesystem>`)
	reTargetDev  = regexp.MustCompile(`<target dev='([^']+)' bus='([^']+)'/>`)
	reTargetDir  = regexp.MustCompile(`<target dir='([^']+)'/>`)
	reMAC        = regexp.MustCompile(`<mac address='([^']+)'/>`)
	reSerial     = regexp.MustCompile(`<serial>([^<]*)</serial>`)
	rePCIAddr    = regexp.MustCompile(`<address type='pci' domain='0x([0-9a-f]+)' bus='0x([0-9a-f]+)' slot='0x([0-9a-f]+)' function='0x([0-9a-f]+)'`)
	reDriveAddr  = regexp.MustCompile(`<address type='drive' controller='(\d+)' bus='(\d+)' target='(\d+)' unit='(\d+)'/>`)
	reController = regexp.MustCompile(`(?s)<controller type='(scsi|sata)' index='(\d+)'[^>]*>.*?</controller>`)
)

// seen is what virsh dumpxml says about each device, keyed "disk vda",
// "nic 52:54:00:..", "share TAG".
type seen map[string]string

func hexNum(s string, width int) string {
	n, err := strconv.ParseUint(s, 16, 32)
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf("%0*x", width, n)
}

func decHex(s string) string {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		panic(err)
	}
	return strconv.FormatUint(n, 16)
}

func pciOf(block string) string {
	m := rePCIAddr.FindStringSubmatch(block)
	if m == nil {
		return ""
	}
	return hexNum(m[1], 4) + ":" + hexNum(m[2], 2) + ":" + hexNum(m[3], 2) + "." + hexNum(m[4], 1)
}

func dumpSeen(t *testing.T, uri, name string, live bool) seen {
	t.Helper()
	args := []string{"dumpxml", name}
	if !live {
		args = append(args, "--inactive")
	}
	doc := virsh(t, uri, args...)
	s := seen{}
	for _, b := range reDiskBlock.FindAllString(doc, -1) {
		m := reTargetDev.FindStringSubmatch(b)
		if m == nil {
			t.Fatalf("disk without target in virsh dumpxml:\n%s", b)
		}
		v := "bus=" + m[2]
		if a := pciOf(b); a != "" {
			v += " addr=" + a
		} else if d := reDriveAddr.FindStringSubmatch(b); d != nil {
			v += " addr=" + decHex(d[1]) + ":" + decHex(d[2]) + ":" + decHex(d[3]) + ":" + decHex(d[4])
		}
		if sm := reSerial.FindStringSubmatch(b); sm != nil {
			v += " serial=" + sm[1]
		}
		s["disk "+m[1]] = v
	}
	for _, b := range reNICBlock.FindAllString(doc, -1) {
		m := reMAC.FindStringSubmatch(b)
		if m == nil {
			t.Fatalf("interface without MAC in virsh dumpxml:\n%s", b)
		}
		s["nic "+m[1]] = "addr=" + pciOf(b)
	}
	for _, b := range reFSBlock.FindAllString(doc, -1) {
		m := reTargetDir.FindStringSubmatch(b)
		if m == nil {
			t.Fatalf("filesystem without target in virsh dumpxml:\n%s", b)
		}
		s["share "+m[1]] = "addr=" + pciOf(b)
	}
	for _, m := range reController.FindAllStringSubmatch(doc, -1) {
		s["controller "+m[1]+"/"+m[2]] = "addr=" + pciOf(m[0])
	}
	return s
}

// parsedSeen renders ParseDevices' result in the same form.
func parsedSeen(t *testing.T, doc []byte) (seen, *Devices) {
	t.Helper()
	devs, err := ParseDevices(doc)
	if err != nil {
		t.Fatalf("ParseDevices: %v", err)
	}
	s := seen{}
	for _, d := range devs.Disks {
		v := "bus=" + d.Bus
		if d.Address != "" {
			v += " addr=" + d.Address
		}
		if d.Serial != "" {
			v += " serial=" + d.Serial
		}
		s["disk "+d.Target] = v
		if d.ControllerAddress != "" {
			s["controller "+d.Bus+"/"+strconv.Itoa(d.Drive.Controller)] = "addr=" + d.ControllerAddress
		}
	}
	for _, n := range devs.NICs {
		s["nic "+n.MAC] = "addr=" + n.Address
	}
	for _, sh := range devs.Shares {
		s["share "+sh.Tag] = "addr=" + sh.Address
	}
	return s, devs
}

// compareSeen checks that every device the parser reports is what virsh
// shows, and that no disk, NIC or share is missing from either side.
func compareSeen(t *testing.T, what string, parsed, independent seen) {
	t.Helper()
	for k, v := range parsed {
		if independent[k] != v {
			t.Errorf("%s: %s: ParseDevices says %q, virsh dumpxml %q", what, k, v, independent[k])
		}
	}
	for k, v := range independent {
		if strings.HasPrefix(k, "controller ") {
			continue // only controllers a disk sits on are reported
		}
		if _, ok := parsed[k]; !ok {
			t.Errorf("%s: %s (%s) is in virsh dumpxml but not in ParseDevices' result", what, k, v)
		}
	}
}

// addressForm checks an address has the form of the metadata.
type addressForm func(string) bool

func (f addressForm) MatchString(s string) bool { return f(s) }

var (
	pciForm  = addressForm(model.IsPCIAddress)
	scsiForm = addressForm(regexp.MustCompile(`^[a-f0-9]+:[a-f0-9]+:[a-f0-9]+:[a-f0-9]+$`).MatchString)
)

func integrationInstance(t *testing.T, name string, d *testDataDir) *model.Instance {
	mac, err := GenerateMAC()
	if err != nil {
		t.Fatal(err)
	}
	return &model.Instance{
		Name: name,
		UUID: randomUUID(t),
		Disks: []model.Disk{
			{Name: "vda", Bus: "virtio", Serial: "root-0001", Tag: "root"},
			{Name: "vdb", Bus: "virtio", Serial: "12345678901234567890", Tag: "squidcache"},
			{Name: "sda", Bus: "scsi", Serial: "disk-vol-2352423", Tag: "oracledb"},
			{Name: "sdb", Bus: "sata", Serial: "sata-0001", Tag: "archive"},
		},
		NICs: []model.NIC{
			{MAC: mac, Tag: "nfvfunc1"},
			{Tag: "nfvfunc2"}, // libvirt chooses the MAC
		},
		Shares: []model.Share{{ShareID: randomUUID(t), Tag: "shared-data", Source: d.share}},
	}
}

// TestDomainAddresses defines a domain with tagged virtio, SCSI and SATA
// disks, two NICs on the default network and a virtiofs share, starts it
// under TCG, and checks that the addresses ParseDevices reads from the
// inactive and the live XML are what `virsh dumpxml` shows, and that QEMU
// was given the SCSI and SATA addresses as the mapping in addresses.go says.
func TestDomainAddresses(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	ctx := testCtx(t, 2*time.Minute)
	c := connect(t, uri, ConnOptions{})
	name := testenv.UniqueDomainName(t)
	d := newTestDataDir(t, "vda", "vdb", "sda", "sdb")
	in := integrationInstance(t, name, d)

	doc, err := BuildDomain(in, d.host, Options{MemoryMiB: 128})
	if err != nil {
		t.Fatal(err)
	}
	testenv.CleanupDomain(t, uri, name)
	start := time.Now()
	dom, err := c.Define(ctx, doc)
	if err != nil {
		t.Fatalf("Define: %v\n%s", err, doc)
	}
	t.Logf("define: %s", time.Since(start))
	if dom.Name != name || dom.UUID != in.UUID {
		t.Errorf("Define returned %+v, want name %s uuid %s", dom, name, in.UUID)
	}

	// Inactive XML: libvirt assigned every address at define time.
	inactive, err := c.XML(ctx, name, false)
	if err != nil {
		t.Fatal(err)
	}
	parsed, devs := parsedSeen(t, inactive)
	compareSeen(t, "inactive", parsed, dumpSeen(t, uri, name, false))
	if err := devs.Apply(in); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for _, k := range in.Disks {
		form := scsiForm
		if k.Bus == model.DiskBusVirtio {
			form = pciForm
		}
		if !form.MatchString(k.Address) {
			t.Errorf("disk %s (%s): address %q does not have the metadata form", k.Name, k.Bus, k.Address)
		}
	}
	for i, n := range in.NICs {
		if !pciForm.MatchString(n.Address) || !model.IsMAC(n.MAC) {
			t.Errorf("nics[%d]: MAC %q address %q", i, n.MAC, n.Address)
		}
	}
	if !strings.HasPrefix(in.NICs[1].MAC, "52:54:00:") {
		t.Errorf("nics[1] got MAC %q; libvirt generates 52:54:00:xx:xx:xx", in.NICs[1].MAC)
	}
	if free := freeRootPorts(t, string(inactive)); free < 4 {
		t.Errorf("%d free pcie-root-ports after define, want the 4 HotplugPorts", free)
	}
	for _, k := range devs.Disks {
		t.Logf("inactive: disk %-4s %-6s %-6s -> %s %s (controller %s) serial %q", k.Target, k.Bus, k.Device, k.MetadataBus, k.Address, k.ControllerAddress, k.Serial)
	}
	for _, n := range devs.NICs {
		t.Logf("inactive: nic %s (%s) -> pci %s", n.MAC, n.Alias, n.Address)
	}
	for _, s := range devs.Shares {
		t.Logf("inactive: share %s -> pci %s", s.Tag, s.Address)
	}

	// Start under TCG; the live XML keeps the addresses.
	start = time.Now()
	if err := c.Start(ctx, name); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("start (TCG): %s", time.Since(start))
	if st, err := c.State(ctx, name); err != nil || st != StateRunning {
		t.Fatalf("State = %q, %v; want running", st, err)
	}
	live, err := c.XML(ctx, name, true)
	if err != nil {
		t.Fatal(err)
	}
	liveParsed, liveDevs := parsedSeen(t, live)
	compareSeen(t, "live", liveParsed, dumpSeen(t, uri, name, true))
	for k, v := range parsed {
		if liveParsed[k] != v {
			t.Errorf("%s: inactive XML says %q, live XML %q", k, v, liveParsed[k])
		}
	}
	if len(liveDevs.Shares) != 1 || liveDevs.Shares[0].Tag != "shared-data" || !pciForm.MatchString(liveDevs.Shares[0].Address) {
		t.Errorf("live virtiofs share: %+v", liveDevs.Shares)
	}

	// What QEMU was told: the SCSI tuple becomes channel/scsi-id/lun, the
	// SATA unit the AHCI port, a virtio disk's PCI bus the root port.
	cmdline := qemuCommandLine(t, name)
	sda, _ := liveDevs.Disk("sda")
	wantSCSI := fmt.Sprintf(`"driver":"scsi-hd","bus":"scsi%d.0","channel":%d,"scsi-id":%d,"lun":%d`,
		sda.Drive.Controller, sda.Drive.Bus, sda.Drive.Target, sda.Drive.Unit)
	if !strings.Contains(cmdline, wantSCSI) {
		t.Errorf("QEMU command line lacks %s:\n%s", wantSCSI, cmdline)
	}
	sdb, _ := liveDevs.Disk("sdb")
	if want := fmt.Sprintf(`"driver":"ide-hd","bus":"ide.%d"`, sdb.Drive.Unit); !strings.Contains(cmdline, want) {
		t.Errorf("QEMU command line lacks %s", want)
	}
	if want := `"id":"ua-disk-vda"`; !strings.Contains(cmdline, want) {
		t.Errorf("QEMU command line lacks %s (the user alias)", want)
	}
	if !strings.Contains(cmdline, `"serial":"12345678901234567890"`) {
		t.Errorf("QEMU command line lacks the 20-byte serial")
	}
	if !strings.Contains(cmdline, "product=OpenStack Nova") || !strings.Contains(cmdline, "manufacturer=OpenStack Foundation") {
		t.Errorf("QEMU command line lacks the SMBIOS identity")
	}
	if !strings.Contains(cmdline, "accel=tcg") && !strings.Contains(cmdline, "-accel tcg") {
		t.Errorf("QEMU does not run under TCG")
	}
	if _, err := os.Stat(filepath.Join(d.dir, "instances", "console.log")); err != nil {
		t.Errorf("serial log: %v", err)
	}

	if err := c.Destroy(ctx, name); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if err := c.undefine(ctx, name); err != nil {
		t.Fatalf("Undefine: %v", err)
	}
	if _, err := c.Lookup(ctx, name); !errorsIs(err, ErrNotFound) {
		t.Errorf("Lookup after Undefine = %v, want ErrNotFound", err)
	}
}

// qemuCommandLine is the running QEMU's argv, joined by spaces.
func qemuCommandLine(t *testing.T, name string) string {
	t.Helper()
	pid, err := os.ReadFile(filepath.Join("/run/libvirt/qemu", name+".pid"))
	if err != nil {
		t.Fatalf("QEMU pid file: %v", err)
	}
	argv, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(pid)), "cmdline"))
	if err != nil {
		t.Fatalf("QEMU command line: %v", err)
	}
	return strings.ReplaceAll(string(argv), "\x00", " ")
}

func errorsIs(err, target error) bool { return err != nil && errors.Is(err, target) }

var (
	reRootPort = regexp.MustCompile(`<controller type='pci' index='(\d+)' model='pcie-root-port'>`)
	rePCIBus   = regexp.MustCompile(`<address type='pci' domain='0x[0-9a-f]+' bus='0x([0-9a-f]+)'`)
)

// freeRootPorts counts the pcie-root-ports of a domain XML no device sits
// behind.
func freeRootPorts(t *testing.T, doc string) int {
	t.Helper()
	used := map[string]bool{}
	for _, m := range rePCIBus.FindAllStringSubmatch(doc, -1) {
		used[hexNum(m[1], 1)] = true
	}
	free := 0
	for _, m := range reRootPort.FindAllStringSubmatch(doc, -1) {
		idx, _ := strconv.Atoi(m[1])
		if !used[strconv.FormatInt(int64(idx), 16)] {
			free++
		}
	}
	return free
}

// testLogWriter sends a Conn's log to the test log.
type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestSpecAddressesHonoured defines a domain whose spec gives addresses
// (virtio disk and NIC on root-complex slots, a SCSI disk on controller 1
// target 2 LUN 3, a SATA disk on port 4) and a virtio config drive, and
// checks that libvirt keeps every one of them.
func TestSpecAddressesHonoured(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	ctx := testCtx(t, time.Minute)
	c := connect(t, uri, ConnOptions{})
	d := newTestDataDir(t, "vda", "vdb", "sda", "sdb")
	in := integrationInstance(t, testenv.UniqueDomainName(t), d)
	in.Disks[0].Address = "0000:00:07.0"
	in.Disks[2].Address = "1:0:2:3"
	in.Disks[3].Address = "0:0:0:4"
	in.NICs[0].Address = "0000:00:08.0"
	want := map[string]string{"vda": "0000:00:07.0", "sda": "1:0:2:3", "sdb": "0:0:0:4"}

	doc, err := BuildDomain(in, d.host, Options{ConfigDriveBus: "virtio"})
	if err != nil {
		t.Fatal(err)
	}
	testenv.CleanupDomain(t, uri, in.Name)
	if _, err := c.Define(ctx, doc); err != nil {
		t.Fatalf("Define: %v\n%s", err, doc)
	}
	inactive, err := c.XML(ctx, in.Name, false)
	if err != nil {
		t.Fatal(err)
	}
	parsed, devs := parsedSeen(t, inactive)
	compareSeen(t, "inactive", parsed, dumpSeen(t, uri, in.Name, false))
	for name, addr := range want {
		if x, _ := devs.Disk(name); x.Address != addr {
			t.Errorf("disk %s: spec address %s, libvirt %q", name, addr, x.Address)
		}
	}
	if n, _ := devs.NIC(in.NICs[0].MAC); n.Address != "0000:00:08.0" {
		t.Errorf("nic: spec address 0000:00:08.0, libvirt %q", n.Address)
	}
	sda, _ := devs.Disk("sda")
	if !pciForm.MatchString(sda.ControllerAddress) || !strings.Contains(string(inactive), "<controller type='scsi' index='1' model='virtio-scsi'>") {
		t.Errorf("SCSI controller 1 is not a virtio-scsi controller (sda controller at %q)", sda.ControllerAddress)
	}
	cd, ok := devs.Disk("vdc")
	if !ok || cd.Alias != ConfigDriveAlias || cd.Device != "disk" || !pciForm.MatchString(cd.Address) {
		t.Errorf("virtio config drive: %+v", cd)
	}
	if !strings.Contains(string(inactive), "<readonly/>") {
		t.Errorf("config drive is not read-only")
	}
}

// TestNamesAgainstLibvirt checks ValidateName against libvirt itself:
// names it accepts define and start (the long one makes libvirt derive
// long file names), names with '/' libvirt refuses too.
func TestNamesAgainstLibvirt(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	ctx := testCtx(t, time.Minute)
	c := connect(t, uri, ConnOptions{})
	base := testenv.UniqueDomainName(t)
	for _, name := range []string{
		base + "-ünïcode with space",
		base + strings.Repeat("n", MaxNameLength-len(base)),
	} {
		if err := ValidateName(name); err != nil {
			t.Fatalf("ValidateName(%q): %v", name, err)
		}
		in := &model.Instance{Name: name, UUID: randomUUID(t)}
		doc, err := BuildDomain(in, Host{DataDir: t.TempDir()}, Options{MemoryMiB: 64})
		if err != nil {
			t.Fatal(err)
		}
		testenv.CleanupDomain(t, uri, name)
		if _, err := c.Define(ctx, doc); err != nil {
			t.Errorf("libvirt refuses %q: %v", name, err)
			continue
		}
		if err := c.Start(ctx, name); err != nil {
			t.Errorf("start %q: %v", name, err)
		}
		if err := c.Remove(ctx, name); err != nil {
			t.Errorf("remove %q: %v", name, err)
		}
	}
	bad := base + "/x"
	if ValidateName(bad) == nil {
		t.Fatalf("ValidateName(%q) accepted", bad)
	}
	doc := fmt.Sprintf("<domain type='qemu'><name>%s</name><memory unit='MiB'>64</memory><os><type arch='x86_64' machine='q35'>hvm</type></os></domain>", bad)
	testenv.CleanupDomain(t, uri, bad)
	if _, err := c.Define(ctx, []byte(doc)); err == nil {
		t.Errorf("libvirt accepted %q, which ValidateName refuses", bad)
	} else {
		t.Logf("libvirt refuses %q too: %v", bad, err)
	}
}
