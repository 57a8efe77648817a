package guestvm

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/testenv"
)

// cephGuestScript mounts the CephFS share the metadata lists (vmeta-agent
// apply), reads the file the host put in CephFS, writes one of its own
// (guest-N.txt, N the boot), waits for the host's go.txt (written after
// the host rotated the CephX client), writes after-rotation-N.txt through
// the same mount, and ends the boot's report; the guest then powers off.
const cephGuestScript = `
mkdir -p /run/udev /etc/udev /mnt/shares
/lib/systemd/systemd-udevd --daemon --resolve-names=never 2>/run/udevd.log
udevadm trigger --type=subsystems --action=add
udevadm trigger --type=devices --action=add
udevadm settle --timeout=120
vmeta-agent apply --share-wait 60s >/run/apply.log 2>&1
echo "vmeta-ceph: apply rc=$?"
D=/mnt/shares/cephdata
printf 'vmeta-ceph: mount %s\n' "$(findmnt -n -o SOURCE,FSTYPE $D || echo none)"
printf 'vmeta-ceph: read %s\n' "$(cat $D/hello.txt 2>/dev/null || echo none)"
N=1; [ -e $D/guest-1.txt ] && N=2
echo "guest-boot-$N" > $D/guest-$N.txt && echo "vmeta-ceph: wrote guest-$N.txt"
printf 'vmeta-ceph: list %s\n' "$(ls $D | tr '\n' ,)"
echo "vmeta-ceph: waiting-$N"
i=0
until [ -e $D/go-$N.txt ]; do
	i=$((i+1)); if [ $i -gt 1500 ]; then echo "vmeta-ceph: go-timeout"; break; fi; sleep 0.2
done
echo "after-rotation-$N" > $D/after-rotation-$N.txt && echo "vmeta-ceph: wrote-after after-rotation-$N.txt"
sync
sed 's/^/vmeta-ceph: applylog /' /run/apply.log
echo "vmeta-ceph: boot-done"
`

// cephFuseClient returns the CephX entity of the ceph-fuse process
// mounted at dir ("" when none).
func cephFuseClient(t *testing.T, dir string) string {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte("ceph-fuse")) {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) == 0 || args[len(args)-1] != dir {
			continue
		}
		for i, a := range args {
			if a == "-n" && i+1 < len(args) {
				return args[i+1]
			}
		}
	}
	return ""
}

// TestCephFSShareInBootedGuest (issue 25, item 5): a CephFS share of the
// real test cluster reaches a booted guest through the host's ceph-fuse
// mount and virtiofs. `hostctl share ceph-auth` gives the daemon the
// admin keyring (its client client.vmeta-HOST.1 is created), `share
// create --proto cephfs`, `share attach`, `instance start`: the guest
// reads the file the host wrote in CephFS and writes its own. While it
// runs, `hostctl keys rotate cephx --wait` makes generation 2: the
// running instance keeps its generation-1 mount (`keys status` names it as
// a holder) and writes through it after the rotation. The guest powers
// off (the mount goes); the next start mounts with generation 2, and the
// guest reads everything written so far and writes again. Every file is
// then read back through an admin mount of CephFS.
func TestCephFSShareInBootedGuest(t *testing.T) {
	c := testenv.CephCluster(t)
	uri := testenv.RequireLibvirt(t)
	for _, p := range []string{udevadmBin, findmntBin} {
		if _, err := os.Stat(p); err != nil {
			testenv.Require(t, p, "install udev and util-linux (test/setup)")
		}
	}
	testenv.LookPath(t, "qemu-img")
	path := c.CephPath(t, "guest")
	const hello = "hello-from-cephfs"
	c.WithAdminMount(t, func(root string) {
		if err := os.WriteFile(filepath.Join(root, path, "hello.txt"), []byte(hello), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	work := t.TempDir()
	agentBin := buildAgent(t, work)
	hostctlBin := buildHostctl(t, work)
	g := testenv.BuildGuestImage(t, work, baseFiles(), []testenv.GuestFile{{Path: "/usr/bin/vmeta-agent", Src: agentBin, Mode: 0o755}}, cephGuestScript)
	host := "gvm-" + strings.TrimPrefix(testenv.UniqueDomainName(t), "vmeta-test-")
	host = strings.ToLower(strings.ReplaceAll(host, "_", "-"))
	d := startHostd(t, hostctlBin, uri, g, "--host", host)
	t.Cleanup(func() {
		for _, gen := range []string{"1", "2", "3"} {
			_, _ = c.AdminErr("auth", "rm", "client.vmeta-"+host+"."+gen)
		}
	})

	var auth types.CephAuthResult
	d.ctlJSON(&auth, "share", "ceph-auth", "--admin-keyring", c.AdminKeyring, "--mon", c.Mon)
	if auth.Client != "client.vmeta-"+host+".1" || auth.CephVersion == "" {
		t.Fatalf("ceph-auth: %+v", auth)
	}
	name := "ceph-" + strings.TrimPrefix(testenv.UniqueDomainName(t), "vmeta-test-")
	testenv.CleanupDomain(t, uri, name)
	spec := filepath.Join(work, "spec.yaml")
	if err := os.WriteFile(spec, []byte("name: "+name+"\nproject_id: demo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.ctl("instance", "apply", "-f", spec)
	var sh types.ShareBody
	d.ctlJSON(&sh, "share", "create", "--proto", "cephfs", "--export", c.Mon+":"+path, "--fs", c.FS, "--project", "demo")
	mnt := filepath.Join(d.DataDir, "shares", ".nfs", sh.Share.ID)
	t.Cleanup(func() { _ = runQuiet("umount", "-l", mnt) })
	var m types.ServerShareBody
	d.ctlJSON(&m, "share", "attach", name, sh.Share.ID, "--tag", "cephdata")

	// Boot 1, generation 1.
	start := time.Now()
	d.ctl("instance", "start", name)
	console := filepath.Join(d.DataDir, "instances", name, "console.log")
	testenv.WaitConsole(t, console, "vmeta-ceph: waiting-1", bootTimeout)
	t.Logf("boot with the CephFS share to the guest's first write under TCG: %s", time.Since(start).Round(time.Second))
	if got := cephFuseClient(t, mnt); got != "client.vmeta-"+host+".1" {
		t.Errorf("ceph-fuse of boot 1 runs as %q, want generation 1", got)
	}

	// Rotation while it runs: generation 2; the instance holds 1.
	d.ctl("keys", "rotate", "cephx", "--wait")
	var reps []types.KeyReport
	d.ctlJSON(&reps, "keys", "status", "cephx")
	if len(reps) != 1 || reps[0].Status.KeyGeneration != 2 || reps[0].Status.KeyCephVersion == "" ||
		len(reps[0].Holders) != 1 || reps[0].Holders[0].Generation != 1 || reps[0].Holders[0].ShareID != sh.Share.ID {
		t.Errorf("keys status cephx after the rotation: %+v; want generation 2, keyCephVersion, the instance holding generation 1", reps)
	}
	if err := os.WriteFile(filepath.Join(mnt, "go-1.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r1 := cephBootReport(t, console, 1, hotplugTimeout)
	if r1["read"] != hello || !strings.HasPrefix(r1["mount"], "cephdata virtiofs") || r1["wrote"] != "guest-1.txt" || r1["wrote-after"] != "after-rotation-1.txt" {
		t.Errorf("boot 1: %v; want the share mounted, hello read, guest-1 and after-rotation-1 written", r1)
	}

	// The guest powered off: the mapping goes inactive and the mount goes.
	deadline := time.Now().Add(2 * time.Minute)
	var ms types.ServerSharesBody
	for {
		d.ctlJSON(&ms, "share", "mappings", name)
		if len(ms.Shares) == 1 && ms.Shares[0].Status == types.ShareInactive && cephFuseClient(t, mnt) == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the guest powered off: mappings %+v, ceph-fuse %q; want inactive and unmounted", ms.Shares, cephFuseClient(t, mnt))
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Boot 2: the restart moves the instance to generation 2.
	d.ctl("instance", "start", name)
	testenv.WaitConsole(t, console, "vmeta-ceph: waiting-2", bootTimeout)
	if got := cephFuseClient(t, mnt); got != "client.vmeta-"+host+".2" {
		t.Errorf("ceph-fuse of boot 2 runs as %q, want generation 2", got)
	}
	var after []types.KeyReport // (fresh: decoding into reps would keep its Holders)
	d.ctlJSON(&after, "keys", "status", "cephx")
	if len(after) != 1 || len(after[0].Holders) != 0 || after[0].Status.KeyGeneration != 2 {
		t.Errorf("keys status cephx after the restart: %+v, want generation 2 and no holder", after)
	}
	if err := os.WriteFile(filepath.Join(mnt, "go-2.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r2 := cephBootReport(t, console, 2, hotplugTimeout)
	for _, f := range []string{"hello.txt", "guest-1.txt", "after-rotation-1.txt"} {
		if !strings.Contains(r2["list"], f) {
			t.Errorf("boot 2 lists %q; want %s", r2["list"], f)
		}
	}
	if r2["wrote"] != "guest-2.txt" || r2["wrote-after"] != "after-rotation-2.txt" {
		t.Errorf("boot 2: %v", r2)
	}
	c.WithAdminMount(t, func(root string) {
		for f, want := range map[string]string{"guest-1.txt": "guest-boot-1\n", "after-rotation-1.txt": "after-rotation-1\n",
			"guest-2.txt": "guest-boot-2\n", "after-rotation-2.txt": "after-rotation-2\n"} {
			b, err := os.ReadFile(filepath.Join(root, path, f))
			if err != nil || string(b) != want {
				t.Errorf("CephFS %s: %q, %v; want %q", f, b, err, want)
			}
		}
	})
	if out, err := json.Marshal(r2); err == nil {
		t.Logf("boot 2 report: %s", out)
	}
}

// cephBootReport waits for the n-th "vmeta-ceph: boot-done" on the
// console and returns the "vmeta-ceph:" lines of that boot.
func cephBootReport(t *testing.T, console string, n int, timeout time.Duration) map[string]string {
	t.Helper()
	const prefix = "vmeta-ceph: "
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(console)
		boots := strings.Split(string(b), prefix+"boot-done")
		if len(boots) > n {
			out := map[string]string{}
			for _, l := range strings.Split(boots[n-1], "\n") {
				l = strings.TrimRight(l, "\r")
				if i := strings.Index(l, prefix); i >= 0 {
					k, v, _ := strings.Cut(l[i+len(prefix):], " ")
					if k != "applylog" {
						out[k] = v
					}
				}
			}
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("no boot %d report on the console within %s:\n%s", n, timeout, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func runQuiet(name string, args ...string) error { return exec.Command(name, args...).Run() }
