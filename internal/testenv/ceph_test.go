package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCephCluster starts (or finds) the test Ceph cluster, checks that the
// file system answers and that a test path can be made and written through
// ceph-fuse, and prints what the cluster costs: the script's start time and
// the daemons' resident memory.
func TestCephCluster(t *testing.T) {
	c := CephCluster(t)
	if out := c.Admin(t, "fs", "ls", "--format", "json"); !strings.Contains(out, `"name":"cephfs"`) {
		t.Fatalf("ceph fs ls: no cephfs in %s", out)
	}
	p := c.CephPath(t, "testenv")
	c.WithAdminMount(t, func(root string) {
		f := filepath.Join(root, p, "hello")
		if err := os.WriteFile(f, []byte("hi"), 0o600); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(f); err != nil || string(b) != "hi" {
			t.Fatalf("read back %q, %v", b, err)
		}
	})
	var total int64
	for _, d := range []string{"mon.a", "mgr.x", "osd.0", "mds.a"} {
		pid, err := os.ReadFile(filepath.Join(c.Dir, "out", d+".pid"))
		if err != nil {
			t.Fatalf("pid of %s: %v", d, err)
		}
		rss := rssKiB(t, strings.TrimSpace(string(pid)))
		total += rss
		t.Logf("ceph %s: %d MiB resident", d, rss/1024)
	}
	t.Logf("ceph cluster: %d MiB resident in all; %s", total/1024, c.Setup)
}

func rssKiB(t *testing.T, pid string) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatalf("status of pid %s: %v", pid, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatalf("no VmRSS for pid %s", pid)
	return 0
}
