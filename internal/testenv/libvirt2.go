//go:build linux

package testenv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

// SecondLibvirtd starts another libvirtd on this machine, as a second
// host's hypervisor (the tests of moves between hosts), and returns its
// URI (qemu:///system?socket=DIR/libvirt-sock). It runs in a private
// mount namespace (unshare -m) over fresh directories bind-mounted on
// /run/libvirt, /var/lib/libvirt, /var/cache/libvirt, /var/log/libvirt
// and a copy of /etc/libvirt (with no domain, no secret and no network
// autostarted, so virbr0 stays the first daemon's) whose libvirtd.conf
// gives it its own host_uuid (libvirt refuses a migration between daemons
// of one UUID) and puts its socket in DIR, which both namespaces see.
// Its own virtlogd runs in the namespace too. When the test ends its
// domains are destroyed and undefined and both daemons stopped.
//
// It needs root, unshare and libvirtd (test/setup installs them), and
// the first libvirtd (RequireLibvirt, whose shared lock the test takes);
// without them the test stops through Require.
func SecondLibvirtd(t testing.TB) (uri string) {
	t.Helper()
	RequireLibvirt(t)
	if os.Geteuid() != 0 {
		Require(t, "a second libvirtd", "needs root (mount namespaces and bind mounts)")
		return ""
	}
	for _, bin := range []string{"unshare", "libvirtd", "virtlogd"} {
		if _, err := exec.LookPath(bin); err != nil {
			Require(t, "a second libvirtd", fmt.Sprintf("%s not found: %v", bin, err))
			return ""
		}
	}
	// A unix socket path has at most 108 bytes: a short directory.
	dir, err := os.MkdirTemp("", "vmeta-lv2-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, d := range []string{"run", "lib", "cache", "log", "etc", "sock"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The configuration only: not the first daemon's domains and secrets
	// (which other tests write while this copies).
	if err := os.MkdirAll(filepath.Join(dir, "etc", "qemu"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"libvirt.conf", "libvirt-admin.conf", "qemu.conf", "nwfilter", "qemu/networks"} {
		src := filepath.Join("/etc/libvirt", f)
		if _, err := os.Stat(src); err != nil {
			continue
		}
		if out, err := exec.Command("cp", "-a", src, filepath.Join(dir, "etc", f)).CombinedOutput(); err != nil {
			t.Fatalf("copy %s: %v: %s", src, err, out)
		}
	}
	for _, pattern := range []string{"etc/qemu/networks/autostart/*"} {
		ms, _ := filepath.Glob(filepath.Join(dir, pattern))
		for _, m := range ms {
			if err := os.RemoveAll(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	id, err := os.ReadFile("/proc/sys/kernel/random/uuid")
	if err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("host_uuid = %q\nunix_sock_dir = %q\n", strings.TrimSpace(string(id)), filepath.Join(dir, "sock"))
	if err := os.WriteFile(filepath.Join(dir, "etc", "libvirtd.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"/var/cache/libvirt", "/var/log/libvirt", "/var/lib/libvirt", "/run/libvirt"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := "set -e\nmount --make-rprivate /\n"
	for _, m := range [][2]string{{"run", "/run/libvirt"}, {"lib", "/var/lib/libvirt"}, {"cache", "/var/cache/libvirt"}, {"log", "/var/log/libvirt"}, {"etc", "/etc/libvirt"}} {
		script += fmt.Sprintf("mount --bind %s %s\n", filepath.Join(dir, m[0]), m[1])
	}
	script += "virtlogd -d -p /run/libvirt/virtlogd.pid\nexec libvirtd -p /run/libvirt/libvirtd.pid\n"
	cmd := exec.Command("unshare", "-m", "sh", "-c", script)
	cmd.Env = ChildEnv(nil)
	p, err := StartProcess(t, "second libvirtd", cmd)
	if err != nil {
		t.Fatalf("start a second libvirtd: %v", err)
	}
	sock := filepath.Join(dir, "sock", "libvirt-sock")
	uri = "qemu:///system?socket=" + sock
	t.Cleanup(func() {
		if err := removeAllDomains(uri); err != nil {
			t.Errorf("second libvirtd: %v", err)
		}
		p.Stop()
		if b, err := os.ReadFile(filepath.Join(dir, "run", "virtlogd.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGTERM)
			}
		}
	})
	if err := p.WaitReady(60*time.Second, 50*time.Millisecond, func() error {
		if _, err := os.Stat(sock); err != nil {
			return err
		}
		return libvirtAnswers(uri, sock)
	}); err != nil {
		t.Fatalf("second libvirtd: %v\nits output:\n%s", err, p.Output())
	}
	return uri
}

// removeAllDomains destroys and undefines every domain of the libvirtd
// at uri.
func removeAllDomains(uri string) error {
	l, err := connectLibvirt(uri)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	ds, _, err := l.ConnectListAllDomains(1, 0)
	l.Disconnect()
	if err != nil {
		return fmt.Errorf("list domains: %w", err)
	}
	var errs []error
	for _, d := range ds {
		if err := removeDomain(uri, d.Name); err != nil && !libvirt.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
