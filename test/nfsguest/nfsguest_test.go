package nfsguest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/shares"
	"github.com/vmeta/vmeta/internal/testenv"
)

// guestTimeout bounds the guest's run, from QEMU's start to its exit:
// about 30 s under TCG on an idle machine of the kind CI uses.
const guestTimeout = 5 * time.Minute

// Addresses of QEMU's user-mode network: the guest's, and the host's
// loopback as the guest sees it.
const (
	guestAddr = "10.0.2.15/24"
	hostAddr  = "10.0.2.2"
)

// guestModules are what the guest loads (with their dependencies, from
// modules.dep): its NIC and the kernel's NFSv4 client.
var guestModules = []string{"virtio_pci", "virtio_net", "nfsv4"}

// TestNFSMountInGuest runs hostctl's NFS mount code (shares.Mounts with
// the real ExecRunner) in a booted Debian 12 kernel against NFS-Ganesha:
// the share mounts (nfs4 in mountinfo, hostctl's options in effect), the
// host's file is read through it, the guest's file lands in the export,
// a fresh Mounts finds the mount again in the mount table, a second
// instance reuses the mount, the first release keeps it for the second
// and the last release unmounts it.
func TestNFSMountInGuest(t *testing.T) {
	ganeshaBin := testenv.LookPath(t, "ganesha.nfsd")
	qemu := testenv.LookPath(t, "qemu-system-x86_64")
	nsenter := testenv.LookPath(t, "nsenter")
	testenv.LookPath(t, "ip")
	mountNFS := testenv.LookPath(t, "mount.nfs")
	mount := testenv.LookPath(t, "mount")
	umount := testenv.LookPath(t, "umount")
	root := moduleRoot(t)
	tree := testenv.DebianBaseTree(t, root)
	work := t.TempDir()

	check := buildMountcheck(t, root, work)
	export := filepath.Join(work, "export")
	if err := os.Mkdir(export, 0o755); err != nil {
		t.Fatal(err)
	}
	nonce := randHex(t)
	hostText := "written by the host " + nonce
	guestText := "written in the guest " + nonce
	if err := os.WriteFile(filepath.Join(export, HostFile), []byte(hostText), 0o644); err != nil {
		t.Fatal(err)
	}
	ns := startGanesha(t, ganeshaBin, work, export)

	const shareID = "6f0c3a52-9d4e-4a8e-bb4e-2f0a6d1c9e11"
	script := strings.Join([]string{
		"ip link set lo up",
		"ip addr add " + guestAddr + " dev eth0 && ip link set eth0 up || echo 'nfsguest: no network'",
		"/usr/local/bin/mountcheck -export " + hostAddr + ":/export -share " + shareID + " -write '" + guestText + "' -report /dev/ttyS1",
		`echo "nfsguest: mountcheck exited $?"`,
	}, "\n")
	var extra []testenv.GuestFile
	extra = append(extra,
		testenv.GuestFile{Path: "/usr/local/bin/mountcheck", Src: check, Mode: 0o755},
		// util-linux's mount and umount (busybox's would mount NFS
		// itself), and nfs-common's mount helper with its links, as a
		// Debian host has them.
		testenv.GuestFile{Path: "/usr/bin/mount", Src: mount, Mode: 0o755, Libs: true},
		testenv.GuestFile{Path: "/usr/bin/umount", Src: umount, Mode: 0o755, Libs: true},
		testenv.GuestFile{Path: "/sbin/mount.nfs", Src: mountNFS, Mode: 0o755, Libs: true},
		testenv.GuestFile{Path: "/sbin/mount.nfs4", Link: "mount.nfs"},
		testenv.GuestFile{Path: "/sbin/umount.nfs", Link: "mount.nfs"},
		testenv.GuestFile{Path: "/sbin/umount.nfs4", Link: "mount.nfs"},
	)
	if _, err := os.Stat("/etc/netconfig"); err == nil {
		extra = append(extra, testenv.GuestFile{Path: "/etc/netconfig", Src: "/etc/netconfig"})
	}
	g := testenv.BuildTreeGuest(t, work, tree, guestModules, extra, script)

	console, reportLog := filepath.Join(work, "console.log"), filepath.Join(work, "report.log")
	cmd := exec.Command(nsenter, "--net=/proc/"+fmt.Sprint(ns)+"/ns/net", "--", qemu,
		"-nodefaults", "-machine", "pc", "-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", "384",
		"-display", "none", "-no-reboot",
		"-kernel", g.Kernel, "-initrd", g.Initrd, "-append", g.Cmdline,
		"-serial", "file:"+console, "-serial", "file:"+reportLog,
		"-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0,romfile=")
	start := time.Now()
	vm, err := testenv.StartProcess(t, "qemu", cmd)
	if err != nil {
		t.Fatalf("start qemu: %v", err)
	}
	t.Cleanup(vm.Kill)
	select {
	case <-vm.Exited():
	case <-time.After(guestTimeout):
		vm.Kill()
		b, _ := os.ReadFile(console)
		t.Fatalf("the guest did not power off within %s; console:\n%s", guestTimeout, b)
	}
	took := time.Since(start)
	con, _ := os.ReadFile(console)
	if err := vm.Err(); err != nil {
		t.Fatalf("qemu: %v\n%s\nconsole:\n%s", err, vm.Output(), con)
	}
	if !bytes.Contains(con, []byte(testenv.GuestDone)) {
		t.Fatalf("the guest stopped before %q; console:\n%s", testenv.GuestDone, con)
	}
	t.Logf("guest: QEMU start to power-off %s (TCG)", took.Round(100*time.Millisecond))
	r := readReport(t, reportLog, con)
	if len(r.Steps) > 0 && len(r.Steps[0].Mounts) > 0 {
		m := r.Steps[0].Mounts[0]
		t.Logf("guest mountinfo after hostctl's Acquire: %s %s %s %s %s", m.Source, m.Point, m.FSType, m.Options, m.Super)
	}
	checkReport(t, r, shareID, hostText, guestText)
	if t.Failed() || testing.Verbose() {
		t.Logf("console:\n%s", con)
	}

	// The guest's file is in the export, written through hostctl's mount.
	b, err := os.ReadFile(filepath.Join(export, GuestFile))
	if err != nil || string(b) != guestText {
		t.Errorf("%s in the export on the host: %q, %v; want %q", GuestFile, b, err, guestText)
	}
}

// checkReport asserts each step of the guest's run.
func checkReport(t *testing.T, r Report, shareID, hostText, guestText string) {
	t.Helper()
	want := []struct {
		name    string
		mounted bool
		users   []string
	}{
		{"acquire a", true, []string{"instance-a"}},
		{"acquire b", true, []string{"instance-a", "instance-b"}},
		{"release a", true, []string{"instance-b"}},
		{"release b", false, nil},
	}
	if len(r.Steps) != len(want) {
		t.Fatalf("report has %d steps, want %d: %+v", len(r.Steps), len(want), r)
	}
	point := filepath.Join("/run/vmeta/shares", shareID)
	for i, w := range want {
		s := r.Steps[i]
		if s.Name != w.name {
			t.Errorf("step %d is %q, want %q", i, s.Name, w.name)
			continue
		}
		if s.Err != "" {
			t.Errorf("%s: %s", s.Name, s.Err)
		}
		if strings.Join(s.Users, ",") != strings.Join(w.users, ",") {
			t.Errorf("%s: users %v, want %v", s.Name, s.Users, w.users)
		}
		if !w.mounted {
			if len(s.Mounts) != 0 {
				t.Errorf("%s: still mounted: %+v", s.Name, s.Mounts)
			}
			if s.ReadErr == "" {
				t.Errorf("%s: %s still readable at the share's directory: %q", s.Name, HostFile, s.Read)
			}
			continue
		}
		// One mount, not one per instance: the second Acquire reuses it.
		if len(s.Mounts) != 1 {
			t.Errorf("%s: %d mounts under the shares' directory, want 1: %+v", s.Name, len(s.Mounts), s.Mounts)
			continue
		}
		m := s.Mounts[0]
		if m.Point != point || m.FSType != "nfs4" || m.Source != hostAddr+":/export" {
			t.Errorf("%s: mount %+v, want nfs4 of %s:/export at %s", s.Name, m, hostAddr, point)
		}
		// hostctl's options, on the mount (rw, nosuid, ...) or the NFS
		// superblock (hard).
		opts := "," + m.Options + "," + m.Super + ","
		for _, o := range strings.Split(shares.NFSMountOptions, ",") {
			if !strings.Contains(opts, ","+o+",") {
				t.Errorf("%s: mount options %q / %q lack %s (hostctl mounts with %s)", s.Name, m.Options, m.Super, o, shares.NFSMountOptions)
			}
		}
		if s.ReadErr != "" || s.Read != hostText {
			t.Errorf("%s: %s through the mount: %q, %s; want %q", s.Name, HostFile, s.Read, s.ReadErr, hostText)
		}
	}
	if r.WriteErr != "" || r.Wrote != guestText {
		t.Errorf("write %s through the mount: wrote %q, error %q", GuestFile, r.Wrote, r.WriteErr)
	}
	if r.RebuildErr != "" || strings.Join(r.Rebuilt, ",") != shareID {
		t.Errorf("a fresh Mounts found %v mounted (error %q), want [%s]", r.Rebuilt, r.RebuildErr, shareID)
	}
}

// readReport reads mountcheck's report from the guest's second serial
// port.
func readReport(t *testing.T, path string, console []byte) Report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, ReportPrefix); ok {
			var r Report
			if err := json.Unmarshal([]byte(rest), &r); err != nil {
				t.Fatalf("report %q: %v", rest, err)
			}
			return r
		}
	}
	t.Fatalf("no report from the guest (serial port 2: %q); console:\n%s", b, console)
	return Report{}
}

// startGanesha runs NFS-Ganesha (VFS backend, NFSv4 over TCP only: no
// rpcbind) exporting dir as /export on port 2049 in a network namespace
// of its own, with its loopback up, until the test ends, and returns its
// pid (its namespace is /proc/PID/ns/net).
func startGanesha(t *testing.T, bin, work, dir string) int {
	t.Helper()
	conf := filepath.Join(work, "ganesha.conf")
	if err := os.WriteFile(conf, []byte(`NFS_CORE_PARAM { Protocols = 4; NFS_Port = 2049; Enable_UDP = false; Enable_NLM = false; Enable_RQUOTA = false; }
NFSV4 { Graceless = true; RecoveryRoot = `+filepath.Join(work, "recovery")+`; }
EXPORT { Export_Id = 1; Path = `+dir+`; Pseudo = /export; Access_Type = RW; Squash = No_Root_Squash; SecType = sys; FSAL { Name = VFS; } }
`), 0o600); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(work, "ganesha.log")
	cmd := exec.Command("sh", "-c", `ip link set lo up && exec "$0" -F -L "$1" -f "$2" -p "$3"`,
		bin, logFile, conf, filepath.Join(work, "ganesha.pid"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	p, err := testenv.StartProcess(t, "ganesha.nfsd", cmd)
	if err != nil {
		t.Fatalf("start ganesha.nfsd in a network namespace: %v", err)
	}
	// SIGKILL: its SIGTERM shutdown is slow, and nothing of it outlives
	// the test's directory.
	t.Cleanup(p.Kill)
	pid := cmd.Process.Pid
	if err := p.WaitReady(time.Minute, 100*time.Millisecond, func() error { return listening(pid, 2049) }); err != nil {
		log, _ := os.ReadFile(logFile)
		t.Fatalf("ganesha.nfsd: %v\n%s\n%s", err, p.Output(), log)
	}
	return pid
}

// listening says whether a TCP socket listens on port in the network
// namespace of process pid (/proc/PID/net/tcp and tcp6: local address
// field hex ADDR:PORT, state 0A).
func listening(pid, port int) error {
	suffix := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 3 && strings.HasSuffix(fs[1], suffix) && fs[3] == "0A" {
				return nil
			}
		}
	}
	return errors.New("nothing listens on port " + fmt.Sprint(port) + " yet")
}

// buildMountcheck builds ./mountcheck static (CGO_ENABLED=0) for the
// guest's architecture, x86_64.
func buildMountcheck(t *testing.T, root, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "mountcheck")
	cmd := exec.Command(testenv.GoTool(), "build", "-trimpath", "-o", out, "./test/nfsguest/mountcheck")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build mountcheck: %v\n%s", err, b)
	}
	return out
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	b, err := exec.Command(testenv.GoTool(), "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(b)))
}

func randHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
