//go:build unix

package testenv

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
)

// Environment variables that point the libvirt tests at another daemon.
const (
	// LibvirtURIEnv overrides the libvirt URI (default qemu:///system).
	LibvirtURIEnv = "VMETA_LIBVIRT_URI"
	// LibvirtSocketEnv overrides the libvirtd socket (default
	// /run/libvirt/libvirt-sock).
	LibvirtSocketEnv = "VMETA_LIBVIRT_SOCKET"
)

// DefaultLibvirtSocket is the socket of qemu:///system (test/setup starts
// libvirtd there).
const DefaultLibvirtSocket = "/run/libvirt/libvirt-sock"

// libvirtAnswerTimeout bounds the check that libvirtd answers.
const libvirtAnswerTimeout = 10 * time.Second

// RequireLibvirt returns the URI of a libvirtd that answers a call
// (qemu:///system over /run/libvirt/libvirt-sock unless VMETA_LIBVIRT_URI /
// VMETA_LIBVIRT_SOCKET say otherwise; a socket other than the default is
// passed as ?socket=). Without one the test stops through Require:
// test/setup starts libvirtd, so under VMETA_REQUIRE_INTEGRATION=1 that is
// a failure.
//
// The test also holds a shared lock until it ends, so a test that restarts
// libvirtd (RequireLibvirtExclusive) never does so under it, whichever
// test binary either runs in (go test ./... runs packages in parallel).
func RequireLibvirt(t testing.TB) (uri string) {
	t.Helper()
	return requireLibvirt(t, syscall.LOCK_SH)
}

// RequireLibvirtExclusive is RequireLibvirt for a test that stops or
// restarts libvirtd: it waits until no other libvirt test runs, and keeps
// them waiting until it ends.
func RequireLibvirtExclusive(t testing.TB) (uri string) {
	t.Helper()
	return requireLibvirt(t, syscall.LOCK_EX)
}

// libvirtLockWait bounds the wait for the libvirt test lock.
const libvirtLockWait = 10 * time.Minute

func requireLibvirt(t testing.TB, how int) (uri string) {
	t.Helper()
	uri = os.Getenv(LibvirtURIEnv)
	if uri == "" {
		uri = "qemu:///system"
	}
	sock := os.Getenv(LibvirtSocketEnv)
	if sock == "" {
		sock = DefaultLibvirtSocket
	} else {
		u, err := url.Parse(uri)
		if err != nil {
			t.Fatalf("%s=%q: %v", LibvirtURIEnv, uri, err)
		}
		q := u.Query()
		q.Set("socket", sock)
		u.RawQuery = q.Encode()
		uri = u.String()
	}
	lockLibvirt(t, how)
	if err := libvirtAnswers(uri, sock); err != nil {
		Require(t, "libvirtd", fmt.Sprintf("%v (run test/setup as root to start libvirtd and virtlogd)", err))
		return ""
	}
	return uri
}

// lockLibvirt takes the machine-wide libvirt test lock (flock on a file in
// the temporary directory) shared or exclusive, and releases it when the
// test ends.
func lockLibvirt(t testing.TB, how int) {
	t.Helper()
	lockFile(t, "vmeta-test-libvirtd.lock", how, libvirtLockWait)
}

// metadataRouteLockWait bounds the wait for the metadata-route lock: a
// holder boots a guest or two under TCG.
const metadataRouteLockWait = 30 * time.Minute

// LockMetadataRoute takes the machine-wide lock of the guests' route to
// 169.254.169.254 (exclusive, until the test ends). Tests that point it
// somewhere (`hostctl network setup-metadata`: a DNAT rule at the top of
// PREROUTING, or the address on virbr0) take it, so that two test
// packages running at once never catch each other's guests.
func LockMetadataRoute(t testing.TB) {
	t.Helper()
	lockFile(t, "vmeta-test-metadata-route.lock", syscall.LOCK_EX, metadataRouteLockWait)
}

// lockFile takes a flock on a file in the temporary directory (shared or
// exclusive), polling up to wait, and releases it when the test ends.
func lockFile(t testing.TB, name string, how int, wait time.Duration) {
	t.Helper()
	p := filepath.Join(os.TempDir(), name)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		t.Fatalf("test lock %s: %v", p, err)
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			t.Fatalf("test lock %s: %v (waited %s)", p, err, wait)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}

// libvirtAnswers connects over sock and asks for the library version.
func libvirtAnswers(uri, sock string) error {
	if _, err := os.Stat(sock); err != nil {
		return fmt.Errorf("no libvirtd socket: %w", err)
	}
	u, err := url.Parse(uri)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(sock), dialers.WithLocalTimeout(libvirtAnswerTimeout)))
		if err := l.ConnectToURI(libvirt.RemoteURI(u)); err != nil {
			done <- fmt.Errorf("libvirtd at %s does not accept %s: %w", sock, uri, err)
			return
		}
		defer l.Disconnect()
		if _, err := l.ConnectGetLibVersion(); err != nil {
			done <- fmt.Errorf("libvirtd at %s does not answer: %w", sock, err)
			return
		}
		done <- nil
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(libvirtAnswerTimeout):
		return fmt.Errorf("libvirtd at %s did not answer within %s", sock, libvirtAnswerTimeout)
	}
}

// UniqueDomainName returns a domain name no other test uses:
// vmeta-test-<8 hex digits>.
func UniqueDomainName(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random domain name: %v", err)
	}
	return "vmeta-test-" + hex.EncodeToString(b)
}

// CleanupDomain registers a cleanup that destroys and undefines the domain
// name over libvirt's own API (go-libvirt, not the code under test), so it
// runs whatever state that code left, also after a failure. A domain that
// does not exist is fine; one that cannot be removed fails the test.
func CleanupDomain(t testing.TB, uri, name string) {
	t.Helper()
	t.Cleanup(func() {
		if err := removeDomain(uri, name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// removeDomain destroys and undefines the domain name, whatever its
// state. It acts without looking at the state first (a guest may power
// itself off, or a transient domain vanish, at any moment) and takes the
// errors that say the wanted state is already there as success, by their
// libvirt error code: destroy's "domain is not running"
// (VIR_ERR_OPERATION_INVALID), and "domain not found" (VIR_ERR_NO_DOMAIN)
// at any step.
func removeDomain(uri, name string) error {
	l, err := connectLibvirt(uri)
	if err != nil {
		return fmt.Errorf("remove domain %s: %w", name, err)
	}
	defer l.Disconnect()
	d, err := l.DomainLookupByName(name)
	if libvirt.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up domain %s: %w", name, err)
	}
	if err := l.DomainDestroy(d); err != nil && !libvirt.IsNotFound(err) && !isLibvirtError(err, libvirt.ErrOperationInvalid) {
		return fmt.Errorf("destroy domain %s: %w", name, err)
	}
	// A transient domain is gone once destroyed: not found is success.
	flags := libvirt.DomainUndefineManagedSave | libvirt.DomainUndefineSnapshotsMetadata |
		libvirt.DomainUndefineNvram | libvirt.DomainUndefineCheckpointsMetadata
	if err := l.DomainUndefineFlags(d, flags); err != nil && !libvirt.IsNotFound(err) {
		return fmt.Errorf("undefine domain %s: %w", name, err)
	}
	return nil
}

// isLibvirtError reports whether err is a libvirt error with code.
func isLibvirtError(err error, code libvirt.ErrorNumber) bool {
	var e libvirt.Error
	return errors.As(err, &e) && e.Code == uint32(code)
}

// connectLibvirt connects to uri (qemu:///system, or with ?socket= the
// socket RequireLibvirt named) over its local socket.
func connectLibvirt(uri string) (*libvirt.Libvirt, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("libvirt URI %q: %w", uri, err)
	}
	sock := u.Query().Get("socket")
	if sock == "" {
		sock = DefaultLibvirtSocket
	}
	l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(sock), dialers.WithLocalTimeout(libvirtAnswerTimeout)))
	if err := l.ConnectToURI(libvirt.RemoteURI(u)); err != nil {
		return nil, fmt.Errorf("connect to %s over %s: %w", uri, sock, err)
	}
	return l, nil
}

// GuestKernelDir is where test/setup unpacks Debian's generic kernel for
// test guests: vmlinuz, modules/*.ko and modules.order (load order).
const GuestKernelDir = "/var/cache/vmeta/guest-kernel"

// GuestReady is the line a test guest prints on its serial console once
// its modules are loaded, before it runs the test's script; GuestDone
// follows the script, after which the guest powers off.
const (
	GuestReady = "vmeta-guest: ready"
	GuestDone  = "vmeta-guest: done"
)

// Guest is a Linux guest a test can boot directly (libvirt <os><kernel>):
// Debian's kernel and an initramfs of busybox-static, the virtio, SCSI,
// AHCI and virtiofs modules, and an /init that runs a script.
type Guest struct {
	Kernel, Initrd string
	// Cmdline sends the console to the first serial port.
	Cmdline string
}

// BuildGuest writes an initramfs into dir whose /init mounts /proc, /sys
// and /dev, loads the modules, prints GuestReady, runs script (busybox sh,
// PATH=/bin with every busybox applet), prints GuestDone and powers off.
// Without the kernel test/setup unpacks, or without busybox, the test
// stops through Require.
func BuildGuest(t testing.TB, dir, script string) Guest {
	t.Helper()
	kernel := filepath.Join(GuestKernelDir, "vmlinuz")
	order, err := os.ReadFile(filepath.Join(GuestKernelDir, "modules.order"))
	if _, kerr := os.Stat(kernel); kerr != nil || err != nil {
		Require(t, "guest kernel", fmt.Sprintf("%s/vmlinuz and modules.order are missing (test/setup unpacks them)", GuestKernelDir))
		return Guest{}
	}
	busybox := "/bin/busybox"
	if _, err := os.Stat(busybox); err != nil {
		Require(t, "busybox", "/bin/busybox is missing (install busybox-static)")
		return Guest{}
	}
	init := "#!/bin/busybox sh\n" +
		"/bin/busybox --install -s /bin\n" +
		"export PATH=/bin\n" +
		"mount -t proc proc /proc\nmount -t sysfs sysfs /sys\nmount -t devtmpfs devtmpfs /dev\n" +
		"for m in $(cat /modules/order); do insmod /modules/$m.ko 2>/dev/null || echo \"vmeta-guest: insmod $m failed\"; done\n" +
		"sleep 1\n" + // let the SCSI and ATA scans settle
		"echo '" + GuestReady + "'\n" +
		script + "\n" +
		"echo '" + GuestDone + "'\n" +
		"poweroff -f\n"

	var w cpioWriter
	for _, d := range []string{"bin", "dev", "proc", "sys", "mnt", "modules", "tmp"} {
		w.dir(d)
	}
	w.device("dev/console", 5, 1)
	w.fileFrom(t, "bin/busybox", busybox, 0o755)
	w.file("init", []byte(init), 0o755)
	w.file("modules/order", order, 0o644)
	for _, m := range strings.Fields(string(order)) {
		w.fileFrom(t, "modules/"+m+".ko", filepath.Join(GuestKernelDir, "modules", m+".ko"), 0o644)
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := os.WriteFile(initrd, w.finish(), 0o644); err != nil {
		t.Fatalf("write initramfs: %v", err)
	}
	return Guest{Kernel: kernel, Initrd: initrd, Cmdline: "console=ttyS0 panic=-1 quiet loglevel=3"}
}

// cpioWriter writes an initramfs: the "newc" cpio format the kernel
// unpacks (070701 headers, 4-byte alignment, a TRAILER!!! entry).
type cpioWriter struct {
	buf bytes.Buffer
	ino int
}

func (w *cpioWriter) entry(name string, mode, rdevMajor, rdevMinor int, data []byte) {
	w.ino++
	nlink := 1
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	fmt.Fprintf(&w.buf, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		w.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	w.buf.WriteString(name)
	w.buf.WriteByte(0)
	w.pad()
	w.buf.Write(data)
	w.pad()
}

func (w *cpioWriter) pad() {
	for w.buf.Len()%4 != 0 {
		w.buf.WriteByte(0)
	}
}

func (w *cpioWriter) dir(name string) { w.entry(name, 0o040755, 0, 0, nil) }
func (w *cpioWriter) device(name string, major, minor int) {
	w.entry(name, 0o020600, major, minor, nil)
}
func (w *cpioWriter) file(name string, data []byte, perm int) {
	w.entry(name, 0o100000|perm, 0, 0, data)
}
func (w *cpioWriter) finish() []byte { w.entry("TRAILER!!!", 0, 0, 0, nil); return w.buf.Bytes() }
func (w *cpioWriter) fileFrom(t testing.TB, name, src string, perm int) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("initramfs: %v", err)
	}
	w.file(name, b, perm)
}

// WaitConsole polls a serial console log until it contains marker, and
// returns the log. It fails the test after timeout, showing the log.
func WaitConsole(t testing.TB, logPath, marker string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(logPath)
		if bytes.Contains(b, []byte(marker)) {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q on the guest console within %s; console log %s:\n%s", marker, timeout, logPath, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// LibvirtdPidFile is where `libvirtd -d` (test/setup) writes its pid.
const LibvirtdPidFile = "/run/libvirtd.pid"

// LibvirtdPid returns the pid of the running libvirtd named in its pid
// file, or 0.
func LibvirtdPid() int {
	b, err := os.ReadFile(LibvirtdPidFile)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !ProcessRunning(pid) {
		return 0
	}
	return pid
}

// ProcessRunning reports whether pid exists and is not a zombie (nothing
// reaps a daemonized libvirtd on these machines, so kill -0 is not enough).
func ProcessRunning(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z")
}
