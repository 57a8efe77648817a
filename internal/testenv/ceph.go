package testenv

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// CephDirEnv names the directory of the test Ceph cluster (test/ceph/cluster
// reads the same variable); DefaultCephDir is its default.
const (
	CephDirEnv     = "VMETA_CEPH_DIR"
	DefaultCephDir = "/var/tmp/vmeta-ceph"
	// CephMonAddr is the test cluster's monitor (msgr2 on loopback), as
	// test/ceph/cluster starts it.
	CephMonAddr = "127.0.0.1:40300"
	// CephFSName is the test cluster's file system.
	CephFSName = "cephfs"
)

// Ceph is the single-node Ceph cluster of test/ceph/cluster (1 mon, 1 mgr,
// 1 memstore OSD, 1 MDS, the CephFS "cephfs"), shared by every test of the
// machine: tests keep to their own paths (CephPath) and CephX clients.
type Ceph struct {
	// Dir is the cluster's directory; Conf its ceph.conf; AdminKeyring
	// client.admin's keyring (0600).
	Dir, Conf, AdminKeyring string
	// Mon is the monitor address, FS the file system name.
	Mon, FS string
	// Setup is what test/ceph/cluster printed (its warm or cold time).
	Setup string
}

var (
	cephOnce sync.Once
	cephErr  error
	ceph     *Ceph
	cephSkip string
)

// CephScript is test/ceph/cluster in this source tree.
func CephScript() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "test", "ceph", "cluster")
}

// CephCluster gives the test the machine's test Ceph cluster, starting it
// with test/ceph/cluster when it does not answer (idempotent; about 1.5 s
// warm, about 20 s cold, once per test binary). Without Ceph's packages or
// root the test stops through Require; a cluster that does not start fails
// it.
func CephCluster(t testing.TB) *Ceph {
	t.Helper()
	for _, bin := range []string{"ceph", "ceph-mon", "ceph-mgr", "ceph-osd", "ceph-mds", "ceph-fuse", "ceph-authtool", "monmaptool"} {
		if LookPath(t, bin) == "" {
			return nil
		}
	}
	if os.Geteuid() != 0 {
		Require(t, "Ceph test cluster", "it needs root (daemons, ceph-fuse mounts)")
		return nil
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		Require(t, "Ceph test cluster", fmt.Sprintf("no /dev/fuse for ceph-fuse: %v", err))
		return nil
	}
	cephOnce.Do(func() {
		dir := os.Getenv(CephDirEnv)
		if dir == "" {
			dir = DefaultCephDir
		}
		script := CephScript()
		if _, err := os.Stat(script); err != nil {
			cephSkip = fmt.Sprintf("%s: %v", script, err)
			return
		}
		cmd := exec.Command("bash", script)
		cmd.Env = ChildEnv(nil, CephDirEnv+"="+dir)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			cephErr = fmt.Errorf("%s: %w\n%s", script, err, out.String())
			return
		}
		ceph = &Ceph{Dir: dir, Conf: filepath.Join(dir, "ceph.conf"), AdminKeyring: filepath.Join(dir, "keyring"),
			Mon: CephMonAddr, FS: CephFSName, Setup: strings.TrimSpace(out.String())}
	})
	if cephSkip != "" {
		Require(t, "Ceph test cluster", cephSkip)
		return nil
	}
	if cephErr != nil {
		t.Fatalf("start the Ceph test cluster: %v", cephErr)
	}
	t.Logf("ceph: %s", ceph.Setup)
	return ceph
}

// Admin runs the ceph CLI as client.admin (keyring by file) and returns its
// standard output; it fails the test on error.
func (c *Ceph) Admin(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.AdminErr(args...)
	if err != nil {
		t.Fatalf("ceph %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// AdminErr is Admin returning the error (with ceph's standard error).
func (c *Ceph) AdminErr(args ...string) (string, error) {
	cmd := exec.Command("ceph", append([]string{"-c", c.Conf, "-k", c.AdminKeyring, "--connect-timeout", "10"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// CephPath makes a fresh directory for the test in the file system
// (/vmeta-test/<name>-<random>, made through a short-lived client.admin
// ceph-fuse mount) and returns its path in CephFS. Tests keep to their own
// path; nothing removes it (memstore: the cluster's data goes when its OSD
// stops).
func (c *Ceph) CephPath(t testing.TB, name string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	p := "/vmeta-test/" + name + "-" + hex.EncodeToString(b[:])
	c.WithAdminMount(t, func(root string) {
		if err := os.MkdirAll(filepath.Join(root, p), 0o777); err != nil {
			t.Fatalf("mkdir %s in CephFS: %v", p, err)
		}
	})
	return p
}

// WithAdminMount mounts the file system's root as client.admin with
// ceph-fuse on a temporary directory, calls f with it, and unmounts.
func (c *Ceph) WithAdminMount(t testing.TB, f func(root string)) {
	t.Helper()
	mnt, err := os.MkdirTemp("", "vmeta-ceph-admin-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(mnt)
	cmd := exec.Command("ceph-fuse", "-c", c.Conf, "-k", c.AdminKeyring, "--id", "admin",
		"--client_fs", c.FS, "-r", "/", mnt)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ceph-fuse (admin) %s: %v\n%s", mnt, err, out)
	}
	defer func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			// A busy mount goes lazily rather than staying behind.
			_ = exec.Command("umount", "-l", mnt).Run()
			t.Errorf("umount %s: %v\n%s", mnt, err, out)
		}
	}()
	f(mnt)
}
