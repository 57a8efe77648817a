package debianvm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/hostnet"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/pkgbuild"
	"github.com/vmeta/vmeta/internal/testenv"
)

// Timeouts under TCG: Debian with cloud-init reaches "done" in about two
// minutes on a quiet machine, two boots side by side in about three; a
// loaded one (eight test runs on two cores) takes over ten. The base
// image, when test/setup has not built it, takes a few minutes of
// mmdebstrap. These bound a wait for an event; nothing asserts a time.
const (
	imageTimeout = 25 * time.Minute
	bootTimeout  = 25 * time.Minute
	lateTimeout  = 5 * time.Minute
)

const (
	shareTag  = "shared-data"
	shareText = "hello-from-the-host"
	sshKey    = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGj8cJb0mJm3nWq0ZkKqJbq6Gf0x2Z1Zs8c6s6j8c9Xx vmeta-test@host"
	hostname  = "debian-guest"
	// userData is run by the guest's cloud-init (write_files).
	userData = "#cloud-config\nwrite_files:\n  - path: /var/lib/vmeta-test/userdata\n    content: user-data-applied\n"
)

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

func goEnv(t *testing.T, key string) string {
	t.Helper()
	b, err := exec.Command("go", "env", key).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", key, err)
	}
	return strings.TrimSpace(string(b))
}

// agentPackage builds the static agent and its .deb. The inputs are fixed
// (version "test", a fixed time), so an unchanged agent gives the same
// bytes and build-image reuses its cached image.
func agentPackage(t *testing.T, root, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -X github.com/vmeta/vmeta/internal/version.Version=test",
		"-o", bin+"/", "./guest/cmd/vmeta-agent")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build vmeta-agent: %v\n%s", err, out)
	}
	in := pkgbuild.Inputs{Root: root, Bin: bin, Describe: "v0.0.0", MTime: time.Unix(1700000000, 0).UTC(),
		Maintainer: "vmeta tests <vmeta@users.noreply.github.com>", ModCache: goEnv(t, "GOMODCACHE"), GoRoot: goEnv(t, "GOROOT")}
	p, err := pkgbuild.Build(in, pkgbuild.Target{Name: "vmeta-agent", Format: "deb"}, dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// image runs build-image with the agent package and returns the image
// directory (disk.img, vmlinuz, initrd.img, build.txt).
func image(t *testing.T, root, deb string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Require(t, "root", "build-image needs root (mmdebstrap, chroot)")
	}
	testenv.LookPath(t, "mmdebstrap")
	testenv.LookPath(t, "mkfs.ext4")
	ctx, cancel := context.WithTimeout(context.Background(), imageTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "test", "debianvm", "build-image"), deb)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("build-image: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	dir := lines[len(lines)-1]
	info, _ := os.ReadFile(filepath.Join(dir, "build.txt"))
	t.Logf("image %s in %s:\n%s%s", dir, time.Since(start).Round(time.Millisecond), stderr.String(), info)
	return dir
}

func buildHostctl(t *testing.T, root, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "hostctl")
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./hostctl/cmd/hostctl")...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build hostctl: %v\n%s", err, b)
	}
	return out
}

// hostd is a running `hostctl serve --virt libvirt`.
type hostd struct {
	bin     string
	DataDir string
	Socket  string
	// Metadata is the metadata listener, ADDR:PORT.
	Metadata string
	proc     *testenv.Process
}

// startHostd starts hostctl serve booting every domain from the image's
// kernel and initrd (root on the first virtio disk), with the image's
// directory as the image directory, its metadata service listening on
// listenIP (the bridge's address, where `network setup-metadata` sends
// the guests).
func startHostd(t *testing.T, bin, uri, img, listenIP, dataDir, sockDir, firmware string) *hostd {
	t.Helper()
	d := &hostd{bin: bin, DataDir: dataDir, Socket: filepath.Join(sockDir, "hostctl.sock")}
	t.Cleanup(func() {
		d.proc.Stop()
		if t.Failed() {
			t.Logf("hostctl serve logged:\n%s", tail(d.proc.Output(), 60))
		}
	})
	for attempt := 1; ; attempt++ {
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "serve", "--virt", "libvirt", "--libvirt-uri", uri,
			"--domain-type", "qemu", "--domain-memory", "1024",
			"--domain-kernel", filepath.Join(img, "vmlinuz"), "--domain-initrd", filepath.Join(img, "initrd.img"),
			"--domain-cmdline", "root=/dev/vda rw console=ttyS0",
			"--image-dir", img, "--data-dir", d.DataDir, "--socket", d.Socket,
			"--metadata-listen", net.JoinHostPort(listenIP, strconv.Itoa(port)),
			"--reconcile-interval", "0", "--log-level", "debug",
			// LUKS disks: a short PBKDF time (QEMU's default, 2 s, costs
			// that much CPU at every create and start).
			"--luks-iter-time", "100ms",
			// off for the drive-only and metadata-service-only boots
			// (the firmware would win over both), on for the firmware
			// boot.
			"--firmware-metadata", firmware)
		cmd.Env = testenv.ChildEnv([]string{"VMETA_VIRT"})
		if d.proc, err = testenv.StartProcess(t, "hostctl serve", cmd); err != nil {
			t.Fatal(err)
		}
		d.proc.StopTimeout = 30 * time.Second
		err = d.proc.WaitReady(30*time.Second, 50*time.Millisecond, func() error {
			_, err := d.run("instance", "list")
			return err
		})
		if err == nil {
			d.Metadata = net.JoinHostPort(listenIP, strconv.Itoa(port))
			return d
		}
		if attempt == 5 || !strings.Contains(d.proc.Output(), "address already in use") {
			t.Fatalf("start hostctl serve: %v\n%s", err, d.proc.Output())
		}
	}
}

func (d *hostd) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.bin, append(args, "--socket", d.Socket)...)
	cmd.Env = testenv.ChildEnv([]string{"VMETA_VIRT"})
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hostctl %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// ctlJSON runs hostctl with --output json and decodes its answer into v;
// it fails t (the calling test's, not the daemon's: subtests run in
// goroutines of their own).
func (d *hostd) ctlJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out, err := d.run(append(args, "--output", "json")...)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("hostctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitConsole waits until the serial console log, from byte from on (the
// log keeps every boot of the instance), holds marker and returns that part
// of the log; on timeout it fails with the log's tail.
func waitConsole(t *testing.T, path string, from int, marker string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(path)
		if len(b) >= from {
			b = b[from:]
		} else {
			b = nil
		}
		if bytes.Contains(b, []byte(marker)) {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q on the guest console within %s; its last lines (%s):\n%s", marker, timeout, path, tail(string(b), 120))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// report is what vmeta-report printed: the text after "vmeta-debian: <what> ",
// by what.
type report map[string][]string

func parseReport(console string) report {
	r := report{}
	for _, l := range strings.Split(console, "\n") {
		l = strings.TrimRight(l, "\r")
		i := strings.Index(l, "vmeta-debian: ")
		if i < 0 {
			continue
		}
		what, rest, _ := strings.Cut(l[i+len("vmeta-debian: "):], " ")
		r[what] = append(r[what], rest)
	}
	return r
}

func (r report) text(what string) string { return strings.Join(r[what], "\n") }

// TestDebianGuest boots the Debian image three times, proving each
// transport of the metadata with systemd, udev and stock cloud-init:
//
//   - config drive only (serve --firmware-metadata off): what cloud-init
//     and the packaged agent made of vmeta's metadata, a LUKS disk that
//     hostctl created and verified (VMETA_ENCRYPTED=1 on that disk only),
//     a share from the registry (share create, share attach before the
//     first start) mounted and read, then a disk tagged "late" hot-plugged
//     and the unit bound to it started;
//   - metadata service only (config_drive: false, after `hostctl network
//     setup-metadata`), at the same time as the first: cloud-init's
//     OpenStack datasource and the agent's HTTP source find
//     169.254.169.254 and give the same hostname, keys and devices;
//   - firmware: the first instance, stopped, its share detached, the
//     daemon restarted with --firmware-metadata on and the instance
//     started again: the agent loads qemu_fw_cfg itself (udev is told not
//     to, so only the agent's unit, with CAP_SYS_MODULE, can), applies the
//     firmware's entries first, the encrypted disk is still the only one
//     marked, and the share is gone.
//
// The two first boots run side by side (the CI machine has two cores);
// each boot's time is printed, and the total.
func TestDebianGuest(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	testenv.LookPath(t, "qemu-img")
	testenv.LookPath(t, "iptables")
	bridge, err := hostnet.BridgeIPv4("virbr0")
	if err != nil {
		testenv.Require(t, "libvirt's default network", err.Error())
	}
	root := moduleRoot(t)
	work := t.TempDir()

	start := time.Now()
	deb := agentPackage(t, root, work)
	if fi, err := os.Stat(deb); err == nil {
		t.Logf("agent package %s: %.1f MiB, built in %s", filepath.Base(deb), float64(fi.Size())/(1<<20), time.Since(start).Round(time.Millisecond))
	}
	img := image(t, root, deb)
	bin := buildHostctl(t, root, work)
	sockDir, err := os.MkdirTemp("", "vmeta-deb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	dataDir := t.TempDir()
	d := startHostd(t, bin, uri, img, bridge.String(), dataDir, sockDir, "off")

	shareDir := filepath.Join(d.DataDir, "shares", "data")
	if err := os.MkdirAll(shareDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shareDir, "hello.txt"), []byte(shareText), 0o644); err != nil {
		t.Fatal(err)
	}
	var sh types.ShareBody
	d.ctlJSON(t, &sh, "share", "create", "--proto", "local", "--export", shareDir, "--project", project)
	shareID := sh.Share.ID

	top := t
	bootsStart := time.Now()
	var times bootTimes
	var driveName string
	t.Run("boots", func(t *testing.T) {
		t.Run("config drive", func(t *testing.T) {
			t.Parallel()
			name, addr := applyGuest(t, top, d, uri, work, true)
			driveName = name
			var m types.ServerShareBody
			d.ctlJSON(t, &m, "share", "attach", name, shareID, "--tag", shareTag)
			if m.Share.Status != types.ShareInactive {
				t.Fatalf("share attach to the shut-off instance: %+v, want inactive", m.Share)
			}
			console, bootStart := startGuest(t, d, name)
			out := waitConsole(t, console, 0, "vmeta-debian: phase1-done", bootTimeout)
			r := parseReport(out)
			times.add(t, "config drive", bootStart, r)
			checkCloudInit(t, r, addr, []want{
				// ds-identify finds the config-2 label; ConfigDrive is chosen.
				{"cloud-id", "configdrive"},
				{"instance-data", "platform=configdrive"},
				{"instance-data", "subplatform=config-disk (/dev/sr"},
			})
			checkAgent(t, r, `origin="config drive /dev/sr`)
			checkEncrypted(t, r)
			checkShare(t, r, true)
			logTimings(t, r)
			if t.Failed() {
				t.Logf("console tail:\n%s", tail(out, 80))
				t.FailNow()
			}

			// A disk tagged "late" attached to the running guest: its link
			// appears and the unit bound to its device unit starts.
			lateStart := time.Now()
			var hot types.Instance
			d.ctlJSON(t, &hot, "instance", "attach-disk", name, "--tag", "late", "--serial", "vol-late", "--size", "16M")
			out = waitConsole(t, console, 0, "vmeta-debian: late-started", lateTimeout)
			t.Logf("attach-disk --tag late to the bound unit started: %s", time.Since(lateStart).Round(time.Second))
			for _, l := range parseReport(out)["late-started"] {
				t.Logf("console: vmeta-debian: late-started %s", l)
				if !strings.Contains(l, "dev=/dev/vd") {
					t.Errorf("late unit started without the tagged disk: %q", l)
				}
			}
			// Shut down for the firmware boot, the share detached.
			stopStart := time.Now()
			if _, err := d.run("instance", "stop", name, "--timeout", "120s"); err != nil {
				t.Fatal(err)
			}
			t.Logf("instance stop: %s", time.Since(stopStart).Round(time.Second))
			d.ctlJSON(t, &m, "share", "detach", name, shareID)
			var ms types.ServerSharesBody
			d.ctlJSON(t, &ms, "share", "mappings", name)
			if len(ms.Shares) != 0 {
				t.Errorf("share mappings after the detach: %+v, want none", ms.Shares)
			}
		})
		t.Run("metadata service", func(t *testing.T) {
			t.Parallel()
			testenv.LockMetadataRoute(t)
			setupMetadata(t, bin, d.Metadata)
			name, addr := applyGuest(t, t, d, uri, work, false)
			console, bootStart := startGuest(t, d, name)
			out := waitConsole(t, console, 0, "vmeta-debian: phase1-done", bootTimeout)
			r := parseReport(out)
			times.add(t, "metadata service", bootStart, r)
			checkCloudInit(t, r, addr, []want{
				// ds-identify finds no drive but SMBIOS "OpenStack Nova";
				// the OpenStack datasource reads 169.254.169.254.
				{"cloud-id", "openstack"},
				{"instance-data", "platform=openstack"},
				{"instance-data", "subplatform=metadata (http://169.254.169.254)"},
			})
			if dr := r.text("drives"); dr != "" {
				t.Errorf("config_drive: false, but the guest has a config-2 drive: %s", dr)
			}
			checkAgent(t, r, "origin=http://169.254.169.254")
			checkEncrypted(t, r)
			checkShare(t, r, false)
			logTimings(t, r)
			if t.Failed() {
				t.Logf("console tail:\n%s", tail(out, 80))
			}
			if _, err := d.run("instance", "delete", name); err != nil {
				t.Error(err)
			}
		})
	})
	if t.Failed() || driveName == "" {
		return
	}

	t.Run("firmware", func(t *testing.T) {
		// The same data directory, the firmware entries on: the daemon
		// republishes the instance with them (its reconcile pass at start).
		restart := time.Now()
		d.proc.Stop()
		d = startHostd(t, bin, uri, img, bridge.String(), dataDir, sockDir, "on")
		waitLog(t, d, "firmware entries did not match --firmware-metadata", 2*time.Minute)
		t.Logf("hostctl serve restarted with --firmware-metadata on, instance republished: %s", time.Since(restart).Round(time.Millisecond))
		name := driveName
		console := filepath.Join(d.DataDir, "instances", name, "console.log")
		before, err := os.ReadFile(console)
		if err != nil {
			t.Fatal(err)
		}
		_, bootStart := startGuest(t, d, name)
		out := waitConsole(t, console, len(before), "vmeta-debian: phase1-done", bootTimeout)
		r := parseReport(out)
		times.add(t, "firmware (second boot, share detached)", bootStart, r)
		checkAgent(t, r, `origin="firmware (fw_cfg`)
		if fw := r.text("fwcfg"); !strings.Contains(fw, "udev-blacklisted=yes") || !strings.Contains(fw, "loaded-before-agent=no") || !strings.Contains(fw, "loaded=yes") {
			t.Errorf("qemu_fw_cfg: want loaded by the agent alone (blacklisted for udev, absent before the agent started, present after), got %q", fw)
		} else {
			t.Logf("console: vmeta-debian: fwcfg %s", fw)
		}
		checkEncrypted(t, r)
		checkShare(t, r, false)
		logTimings(t, r)
		if t.Failed() {
			t.Logf("console tail:\n%s", tail(out, 80))
		}
		if _, err := d.run("instance", "delete", name); err != nil {
			t.Error(err)
		}
	})
	times.log(t, time.Since(bootsStart))
}

// project owns the test's instances and its share.
const project = "debianvm"

// bootTimes collects each boot's time, from `instance start` to the
// report on the console.
type bootTimes struct {
	mu    sync.Mutex
	lines []string
}

func (b *bootTimes) add(t *testing.T, what string, start time.Time, r report) {
	t.Helper()
	d := time.Since(start).Round(time.Second)
	held, firstLog := agentFigures(r)
	t.Logf("boot (%s) to the report under TCG (KVM would be faster; these machines cannot run it): %s; the agent's unit held the boot %s (ActiveEnter - InactiveExit), its process start to first log line %s",
		what, d, held, firstLog)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, fmt.Sprintf("  %-40s %-8s agent unit %-8s first log line %s", what, d, held, firstLog))
}

// agentFigures returns how long the agent's unit held the boot
// (ActiveEnterTimestampMonotonic - InactiveExitTimestampMonotonic: from
// its start to READY=1) and the time from its process's start to its
// first log line (since_start on "vmeta-agent running"), as text; "?"
// where the report lacks them. Figures to print: nothing asserts a time.
func agentFigures(r report) (held, firstLog string) {
	held, firstLog = "?", "?"
	props := map[string]int64{}
	for _, l := range r["agent-unit"] {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				props[k] = n
			}
		}
	}
	in, out := props["InactiveExitTimestampMonotonic"], props["ActiveEnterTimestampMonotonic"]
	if in > 0 && out >= in {
		held = (time.Duration(out-in) * time.Microsecond).Round(time.Millisecond).String()
	}
	for _, l := range r["agent-journal"] {
		if !strings.Contains(l, `msg="vmeta-agent running"`) {
			continue
		}
		if _, v, ok := strings.Cut(l, "since_start="); ok {
			firstLog, _, _ = strings.Cut(v, " ")
		}
		break
	}
	return held, firstLog
}

func (b *bootTimes) log(t *testing.T, all time.Duration) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	t.Logf("boots, from instance start to the guest's report (the first two side by side):\n%s\n  all boots, wall time: %s", strings.Join(b.lines, "\n"), all.Round(time.Second))
}

// waitLog waits until the daemon's log holds text.
func waitLog(t *testing.T, d *hostd, text string, timeout time.Duration) {
	t.Helper()
	if err := d.proc.WaitReady(timeout, 100*time.Millisecond, func() error {
		if !strings.Contains(d.proc.Output(), text) {
			return fmt.Errorf("no %q in the daemon's log", text)
		}
		return nil
	}); err != nil {
		t.Fatalf("%v:\n%s", err, tail(d.proc.Output(), 40))
	}
}

// applyGuest applies an instance of the image: a tagged data disk, a LUKS
// disk hostctl creates (tagged "secure"), a tagged NIC with a static
// address, keys, user data; a config drive or not. It checks that hostctl
// made and verified the encrypted disk, and only that one. The domain is
// removed when owner ends (the instance of the config drive boot outlives
// its subtest: the firmware boot starts it again).
func applyGuest(t, owner *testing.T, d *hostd, uri, work string, configDrive bool) (name, addr string) {
	t.Helper()
	name = testenv.UniqueDomainName(t)
	testenv.CleanupDomain(owner, uri, name)
	mac, err := virt.GenerateMAC()
	if err != nil {
		t.Fatal(err)
	}
	addr = testenv.DefaultNetworkAddress(owner, uri, testenv.AddrsDebianVM)
	ud, _ := json.Marshal(userData)
	key, _ := json.Marshal(sshKey)
	spec := fmt.Sprintf(`name: %s
project_id: %s
hostname: %s
image: disk.img
config_drive: %t
public_keys:
  - {name: test, data: %s}
user_data: %s
disks:
  - {name: vda}
  - {name: vdb, size: 16M, serial: vol-data, tag: appdata}
  - {name: vdc, size: 16M, serial: vol-secure, tag: secure, encrypted: true}
nics:
  - {mac: "%s", tag: nfvfunc1, ips: [{address: %s/24, gateway: 192.168.122.1, dns: [192.168.122.1]}]}
`, name, project, hostname, configDrive, key, ud, mac, addr)
	specFile := filepath.Join(work, name+".yaml")
	if err := os.WriteFile(specFile, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	var inst types.Instance
	d.ctlJSON(t, &inst, "instance", "apply", "-f", specFile)
	if (inst.ConfigDrive != "") != configDrive {
		t.Errorf("config_drive: %t, but the instance's config drive is %q", configDrive, inst.ConfigDrive)
	}
	// hostctl created vdc as a LUKS disk and verified its header
	// (qemu-img info) before it says so; the others are plain.
	for _, b := range inst.BlockDevices {
		want := b.Disk == "vdc"
		if b.Encrypted != want || (want && (b.EncryptionSecretUUID == "" || b.EncryptionFormat != "luks")) {
			t.Errorf("block device %s: encrypted %t format %q secret %q, want encrypted %t (LUKS)", b.Disk, b.Encrypted, b.EncryptionFormat, b.EncryptionSecretUUID, want)
		}
	}
	if len(inst.BlockDevices) != 3 {
		t.Errorf("block devices: %+v, want vda, vdb, vdc", inst.BlockDevices)
	}
	return name, addr
}

// startGuest starts instance name; it returns its console log and when
// it was started.
func startGuest(t *testing.T, d *hostd, name string) (console string, bootStart time.Time) {
	t.Helper()
	bootStart = time.Now()
	var started types.Instance
	d.ctlJSON(t, &started, "instance", "start", name)
	if started.State != "running" {
		t.Fatalf("state after start %q", started.State)
	}
	return filepath.Join(d.DataDir, "instances", name, "console.log"), bootStart
}

// setupMetadata runs `hostctl network setup-metadata` (dnat mode) sending
// guests' 169.254.169.254:80 on virbr0 to listen, and removes it when the
// test ends.
func setupMetadata(t *testing.T, bin, listen string) {
	t.Helper()
	run := func(args ...string) string {
		out, err := exec.Command(bin, append([]string{"network", "setup-metadata", "--to", listen}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("hostctl network setup-metadata --to %s %s: %v\n%s", listen, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	t.Cleanup(func() { run("--remove") })
	t.Logf("hostctl network setup-metadata --to %s:\n%s", listen, run())
}

// want is a text a report line must contain.
type want struct{ what, text string }

// checkCloudInit checks stock cloud-init's view: the platform, the config
// drive, the hostname, the keys, the user data, the static address on the
// NIC, no warning from cc_mounts, no data disk in fstab, no errors.
func checkCloudInit(t *testing.T, r report, addr string, datasource []want) {
	t.Helper()
	for _, c := range append(datasource, []want{
		{"status", "status: done"},
		{"hostname", hostname},
		{"keys", sshKey},
		{"userdata", "user-data-applied"},
		{"ipaddr", "inet " + addr + "/24"},
		{"result", `"errors": []`},
	}...) {
		if !strings.Contains(r.text(c.what), c.text) {
			t.Errorf("%s: want %q, got:\n%s", c.what, c.text, r.text(c.what))
		} else {
			t.Logf("console: vmeta-debian: %s ... %s", c.what, c.text)
		}
	}
	if w := r.text("mounts-warn"); w != "" {
		t.Errorf("cloud-init's cc_mounts warned:\n%s", w)
	}
	for _, l := range r["fstab"] {
		if f := strings.Fields(l); len(f) > 0 && (strings.HasPrefix(f[0], "/dev/vdb") || strings.Contains(l, "/mnt")) {
			t.Errorf("/etc/fstab names a data disk: %q", l)
		}
	}
	t.Logf("cloud-init warnings (informational):\n%s", r.text("warnings"))
}

// checkAgent checks what the agent, started by systemd, applied, and that
// its first pass read the metadata from origin.
func checkAgent(t *testing.T, r report, origin string) {
	t.Helper()
	links := r.text("link")
	for _, want := range []string{"appdata /dev/vd", "VMETA_TAGS=appdata"} {
		if !strings.Contains(links, want) {
			t.Errorf("by-tag links: want %q, got:\n%s", want, links)
		}
	}
	if !strings.Contains(r.text("net"), "VMETA_TAGS=nfvfunc1") || !strings.Contains(r.text("net"), "altname nfvfunc1") {
		t.Errorf("NIC: want VMETA_TAGS=nfvfunc1 and altname nfvfunc1, got:\n%s", r.text("net"))
	}
	if !strings.Contains(r.text("agent-unit"), "ActiveState=active") {
		t.Errorf("agent unit: %s", r.text("agent-unit"))
	}
	if r.text("agent-version") != "test" {
		t.Errorf("vmeta-agent version = %q, want test", r.text("agent-version"))
	}
	if f := r.text("failed"); f != "" {
		t.Errorf("failed units:\n%s", f)
	}
	first := ""
	for _, l := range r["agent-journal"] {
		if strings.Contains(l, "msg=applied") {
			first = l
			break
		}
	}
	if !strings.Contains(first, origin) {
		t.Errorf("the agent's first pass: want %s, got %q; its journal:\n%s", origin, first, r.text("agent-journal"))
	}
	t.Logf("console: vmeta-debian: link %s", links)
	t.Logf("console: vmeta-debian: net %s", r.text("net"))
	t.Logf("the agent's first pass: %s", first)
}

// checkEncrypted checks the guest's udev properties: VMETA_ENCRYPTED=1 on
// the LUKS disk (serial vol-secure) and on no other disk.
func checkEncrypted(t *testing.T, r report) {
	t.Helper()
	seen := false
	for _, l := range r["disk"] {
		enc := strings.Contains(l, "VMETA_ENCRYPTED=1")
		secure := strings.Contains(l, "serial=vol-secure ")
		seen = seen || secure
		if enc != secure {
			t.Errorf("disk %q: want VMETA_ENCRYPTED=1 on the LUKS disk (serial vol-secure) only", l)
		}
	}
	if !seen {
		t.Errorf("the guest has no disk of serial vol-secure:\n%s", r.text("disk"))
	}
	t.Logf("console: vmeta-debian: disk\n%s", r.text("disk"))
}

// checkShare checks the registry share: attached (mounted by the agent at
// /mnt/shares/<tag>, the host's file read), or not (no virtiofs device,
// no mount).
func checkShare(t *testing.T, r report, attached bool) {
	t.Helper()
	if attached {
		if !strings.Contains(r.text("share"), shareTag+" /mnt/shares/"+shareTag+" virtiofs") || r.text("sharefile") != shareText {
			t.Errorf("share: findmnt %q, file %q; want %s mounted at /mnt/shares/%s and %q read", r.text("share"), r.text("sharefile"), shareTag, shareTag, shareText)
		}
		t.Logf("console: vmeta-debian: share %s, file %q", r.text("share"), r.text("sharefile"))
		return
	}
	if r.text("virtiofs-devices") != "0" || r.text("share") != "" {
		t.Errorf("share: virtiofs devices %q, findmnt %q; want none", r.text("virtiofs-devices"), r.text("share"))
	}
	t.Logf("console: vmeta-debian: virtiofs-devices %s, share mount %q", r.text("virtiofs-devices"), r.text("share"))
}

// logTimings prints the figures of the Measure section.
func logTimings(t *testing.T, r report) {
	t.Helper()
	t.Logf("cloud-init done at guest uptime: %s", r.text("cloud-init-done"))
	t.Logf("the report saw the agent's link and share at guest uptime: %s", r.text("agent-applied"))
	t.Logf("agent unit: %s", r.text("agent-unit")) // its figures: bootTimes.add
	t.Logf("userspace start and boot finished (µs, monotonic): %s", r.text("times"))
	t.Logf("agent journal:\n%s", r.text("agent-journal"))
	t.Logf("critical chain of local-fs-pre.target:\n%s", r.text("chain"))
	t.Logf("systemd-analyze blame (top):\n%s", r.text("blame"))
}
