package guestvm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/testenv"
)

// shareGuestScript mounts what the metadata lists (vmeta-agent apply),
// prints the share's mount and the file the host put in it, and a line
// that ends the boot's report; then the guest powers off (testenv).
const shareGuestScript = `
mkdir -p /run/udev /etc/udev /mnt/shares
/lib/systemd/systemd-udevd --daemon --resolve-names=never 2>/run/udevd.log
udevadm trigger --type=subsystems --action=add
udevadm trigger --type=devices --action=add
udevadm settle --timeout=120
vmeta-agent apply --share-wait 60s >/run/apply.log 2>&1
echo "vmeta-shares: apply rc=$?"
printf 'vmeta-shares: mount %s\n' "$(findmnt -n -o SOURCE,FSTYPE /mnt/shares/regdata || echo none)"
printf 'vmeta-shares: file %s\n' "$(cat /mnt/shares/regdata/hello.txt 2>/dev/null || echo none)"
printf 'vmeta-shares: find %s\n' "$(vmeta-agent find --tag regdata --type share 2>&1)"
sed 's/^/vmeta-shares: applylog /' /run/apply.log
if findmnt -n /mnt/shares/regdata >/dev/null 2>&1; then
	# With the share attached: the agent follows the metadata while the
	# host hot-plugs a second share and hot-unplugs it again.
	vmeta-agent run --poll-interval 1h --log-level debug >/run/agent.log 2>&1 &
	AGENT=$!
	echo "vmeta-shares: waiting-hot"
	i=0
	until [ -e /mnt/shares/hot/hot.txt ]; do
		i=$((i+1)); if [ $i -gt 900 ]; then echo "vmeta-shares: hot-timeout"; break; fi; sleep 0.2
	done
	printf 'vmeta-shares: hotfile %s\n' "$(cat /mnt/shares/hot/hot.txt 2>/dev/null || echo none)"
	i=0
	while findmnt -n /mnt/shares/hot >/dev/null 2>&1; do
		i=$((i+1)); if [ $i -gt 900 ]; then echo "vmeta-shares: unhot-timeout"; break; fi; sleep 0.2
	done
	printf 'vmeta-shares: hotgone %s\n' "$(findmnt -n /mnt/shares/hot >/dev/null 2>&1 && echo no || echo yes)"
	kill $AGENT
	sed 's/^/vmeta-shares: agentlog /' /run/agent.log
fi
echo "vmeta-shares: boot-done"
`

// bootReport waits for the n-th "boot-done" on the console (the log
// keeps every boot) and returns the "vmeta-shares:" lines of that boot.
func bootReport(t *testing.T, console string, n int, timeout time.Duration) map[string]string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(console)
		boots := strings.Split(string(b), "vmeta-shares: boot-done")
		if len(boots) > n {
			out := map[string]string{}
			for _, l := range strings.Split(boots[n-1], "\n") {
				l = strings.TrimRight(l, "\r")
				if i := strings.Index(l, "vmeta-shares: "); i >= 0 {
					k, v, _ := strings.Cut(l[i+len("vmeta-shares: "):], " ")
					if k != "applylog" && k != "agentlog" {
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

// TestShareInBootedGuest: a share of the registry reaches a booted guest.
// `hostctl share create` registers a directory under the share root,
// `hostctl share attach` attaches it to the shut-off instance with tag
// regdata, `hostctl instance start` boots it: libvirt starts virtiofsd,
// the guest's vmeta-agent mounts the share at /mnt/shares/regdata and
// reads the file the host wrote. The guest powers off; the mapping goes
// back to inactive (libvirt's stop event), `hostctl share detach`
// removes it, and after the next boot the guest has neither the mount
// nor the file. Before it powers off, the first boot also sees a second
// share hot-plugged (`share attach --live`: mounted by the agent, its file
// read) and hot-unplugged (`share detach --live`: unmounted).
func TestShareInBootedGuest(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	for _, p := range []string{udevadmBin, findmntBin} {
		if _, err := os.Stat(p); err != nil {
			testenv.Require(t, p, "install udev and util-linux (test/setup)")
		}
	}
	testenv.LookPath(t, "qemu-img")
	work := t.TempDir()
	agentBin := buildAgent(t, work)
	hostctlBin := buildHostctl(t, work)
	g := testenv.BuildGuestImage(t, work, baseFiles(), []testenv.GuestFile{{Path: "/usr/bin/vmeta-agent", Src: agentBin, Mode: 0o755}}, shareGuestScript)
	d := startHostd(t, hostctlBin, uri, g)

	dir := filepath.Join(d.DataDir, "shares", "registry-data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const text = "hello-from-the-registry"
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	name := "shares-" + strings.TrimPrefix(testenv.UniqueDomainName(t), "vmeta-test-")
	testenv.CleanupDomain(t, uri, name)
	spec := filepath.Join(work, "spec.yaml")
	if err := os.WriteFile(spec, []byte("name: "+name+"\nproject_id: demo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.ctl("instance", "apply", "-f", spec)
	var sh types.ShareBody
	d.ctlJSON(&sh, "share", "create", "--proto", "local", "--export", dir, "--project", "demo")
	var m types.ServerShareBody
	d.ctlJSON(&m, "share", "attach", name, sh.Share.ID, "--tag", "regdata")
	if m.Share.Status != types.ShareInactive {
		t.Fatalf("attach: %+v", m.Share)
	}

	start := time.Now()
	d.ctl("instance", "start", name)
	var ms types.ServerSharesBody
	d.ctlJSON(&ms, "share", "mappings", name)
	if len(ms.Shares) != 1 || ms.Shares[0].Status != types.ShareActive {
		t.Errorf("mappings while running: %+v", ms.Shares)
	}
	console := filepath.Join(d.DataDir, "instances", name, "console.log")
	testenv.WaitConsole(t, console, "vmeta-shares: waiting-hot", bootTimeout)
	t.Logf("boot with the share to its report under TCG: %s", time.Since(start).Round(time.Second))

	// Beyond the specification: hot-plug a second share into the running
	// guest (it booted with shared memory), then hot-unplug it.
	hotDir := filepath.Join(d.DataDir, "shares", "hot-data")
	if err := os.MkdirAll(hotDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hotDir, "hot.txt"), []byte("hot-plugged"), 0o644); err != nil {
		t.Fatal(err)
	}
	var hot types.ShareBody
	d.ctlJSON(&hot, "share", "create", "--proto", "local", "--export", hotDir, "--project", "demo")
	hotStart := time.Now()
	d.ctlJSON(&m, "share", "attach", name, hot.Share.ID, "--tag", "hot", "--live")
	if m.Share.Status != types.ShareActive {
		t.Errorf("live attach: %+v, want active", m.Share)
	}
	testenv.WaitConsole(t, console, "vmeta-shares: hotfile", hotplugTimeout)
	t.Logf("live attach to the file read in the guest: %s", time.Since(hotStart).Round(time.Second))
	d.ctl("share", "detach", name, hot.Share.ID, "--live")
	r1 := bootReport(t, console, 1, hotplugTimeout)
	if r1["file"] != text || !strings.HasPrefix(r1["mount"], "regdata virtiofs") || r1["find"] != "/mnt/shares/regdata" {
		t.Errorf("first boot: %v; want the share mounted at /mnt/shares/regdata and the file read", r1)
	}
	if r1["hotfile"] != "hot-plugged" || r1["hotgone"] != "yes" {
		t.Errorf("live attach and detach in the guest: hotfile %q hotgone %q; want the file read, then the mount gone", r1["hotfile"], r1["hotgone"])
	}

	// The guest powered itself off: the mapping follows libvirt's event.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		d.ctlJSON(&ms, "share", "mappings", name)
		if len(ms.Shares) == 1 && ms.Shares[0].Status == types.ShareInactive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mapping after the guest powered off: %+v, want inactive", ms.Shares)
		}
		time.Sleep(200 * time.Millisecond)
	}
	d.ctl("share", "detach", name, sh.Share.ID)
	d.ctl("instance", "start", name)
	r2 := bootReport(t, console, 2, bootTimeout)
	if r2["file"] != "none" || r2["mount"] != "none" {
		t.Errorf("second boot, after the detach: %v; want no mount and no file", r2)
	}
	d.ctlJSON(&ms, "share", "mappings", name)
	if len(ms.Shares) != 0 {
		t.Errorf("mappings after detach: %+v", ms.Shares)
	}
	d.ctl("instance", "delete", name)
	d.ctl("share", "delete", sh.Share.ID)
	d.ctl("share", "delete", hot.Share.ID)
}
