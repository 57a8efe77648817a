package e2e

// End-to-end tests of many hosts on one store: three `hostctl serve`
// processes with their own data directories and --host names on one real
// Redis (and on the real three-node Redis Cluster), two vmeta-metadata
// replicas, guests played from loopback source addresses. Every host owns
// the instances it applied; another host's commands on them are refused
// naming the owner and change nothing; a host killed with SIGKILL goes
// down by its heartbeat, its instances stay served, and only then can
// another host adopt them (one winner of two). A hostctl on libvirt never
// marks another host's instance missing.
//
// Liveness is a heartbeat every 200ms, down after 5s of silence: far
// longer than a beat can be late on a loaded machine, so a live host is
// never taken for down; every wait for a change is a bounded poll.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/testenv"
)

// eventDeadline bounds every wait for something the daemons do on their
// own (a heartbeat, a host going down, a replica dropping a document).
const eventDeadline = 90 * time.Second

// hostArgs are the `hostctl serve` flags of a host named name.
func hostArgs(name string) []string {
	return []string{"--host", name, "--heartbeat-interval", "200ms", "--host-down-after", "5s"}
}

// hostJSON is one host as `hostctl host list --output json` prints it.
type hostJSON struct {
	Host      string `json:"host"`
	Instances int    `json:"instances"`
	Down      bool   `json:"down"`
	Stopped   bool   `json:"stopped"`
}

// hostsOf returns `host list --output json` of daemon d by host name.
func hostsOf(t *testing.T, d *daemon) map[string]hostJSON {
	t.Helper()
	var list []hostJSON
	decodeJSON(t, d.MustCtl("host", "list", "--output", "json").stdout, &list)
	out := map[string]hostJSON{}
	for _, h := range list {
		out[h.Host] = h
	}
	return out
}

// waitHosts polls `host list` on d until cond holds, at most
// eventDeadline, and returns the list that satisfied it.
func waitHosts(t *testing.T, d *daemon, what string, cond func(map[string]hostJSON) bool) map[string]hostJSON {
	t.Helper()
	deadline := time.Now().Add(eventDeadline)
	for {
		hs := hostsOf(t, d)
		if cond(hs) {
			return hs
		}
		if time.Now().After(deadline) {
			t.Fatalf("host list never showed %s within %s; last: %+v", what, eventDeadline, hs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// mhInstance is an instance of the multi-host tests: its owner, its spec
// and the loopback address its guest reads metadata from.
type mhInstance struct {
	name, uuid, addr, owner string
	spec                    string
}

func newMHInstance(name, uuid, addr, owner string) mhInstance {
	spec := fmt.Sprintf("name: %s\nuuid: %s\nhostname: %s\naddresses: [%s]\n", name, uuid, name, addr)
	return mhInstance{name: name, uuid: uuid, addr: addr, owner: owner, spec: spec}
}

// readAsGuest GETs the instance's meta_data.json from its own address
// through the metadata service at baseURL and checks it is its own.
func readAsGuest(t *testing.T, in mhInstance, via, baseURL string) {
	t.Helper()
	r := getFrom(t, in.addr, baseURL+"/openstack/latest/meta_data.json")
	if r.status != http.StatusOK {
		t.Errorf("guest of %s (%s) through %s: status %d, want 200; body %s", in.name, in.addr, via, r.status, r.body)
		return
	}
	if md := decodeMetaData(t, "meta_data.json of "+in.name, r.body); md.UUID != in.uuid {
		t.Errorf("guest of %s (%s) through %s: uuid %s, want %s", in.name, in.addr, via, md.UUID, in.uuid)
	}
}

// showJSON is `instance show NAME --output json` on d (the record as the
// store holds it: host, revision, metadata version, devices).
func showJSON(t *testing.T, d *daemon, name string) string {
	t.Helper()
	return d.MustCtl("instance", "show", name, "--output", "json").stdout
}

// refusals counts cross-host commands refused as they should be.
type refusals struct{ n int }

// expectRefused runs args on d and expects a non-zero exit with a message
// naming the owner ("NAME lives on HOST"), which must come before any
// hypervisor complaint: ownership is checked first.
func (c *refusals) expectRefused(t *testing.T, d *daemon, name, owner string, args ...string) {
	t.Helper()
	r := d.Ctl(args...)
	want := name + " lives on " + owner
	switch {
	case r.code == 0:
		t.Errorf("another host's command succeeded: %s", r)
	case !strings.Contains(r.stderr, want):
		t.Errorf("refusal does not name the owner (want %q): %s", want, r)
	case strings.Contains(r.stderr, "no hypervisor"):
		t.Errorf("refused for the hypervisor mode, not (only) for the owner: %s", r)
	default:
		c.n++
	}
}

// crossHostCommands are the commands a host must refuse on in, another
// host's instance; out is a file the config drive build must not write.
func crossHostCommands(t *testing.T, in mhInstance, out string) [][]string {
	return [][]string{
		{"instance", "apply", "-f", writeSpec(t, in.spec)},
		{"instance", "delete", in.name},
		{"instance", "start", in.name},
		{"instance", "stop", in.name},
		{"instance", "attach-disk", in.name, "--tag", "extra"},
		{"instance", "detach-disk", in.name, "--tag", "extra"},
		{"instance", "attach-nic", in.name, "--tag", "extra"},
		{"configdrive", "build", in.name, "-o", out},
		{"instance", "adopt", in.name},
		{"instance", "delete", in.name, "--force-from-store"},
	}
}

// ctlAsync starts a hostctl client command against d and returns a
// function that waits for it. It does not use t, so it can run on any
// goroutine; failing to run the command yields code -1.
func ctlAsync(d *daemon, args ...string) func() result {
	args = append(args, "--socket", d.Socket)
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, hostctlBin, args...)
		cmd.Env = testenv.ChildEnv(nil)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		r := result{args: append([]string{"hostctl"}, args...), stdout: stdout.String(), stderr: stderr.String()}
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee) && ctx.Err() == nil:
			r.code = ee.ExitCode()
		default:
			r.code, r.stderr = -1, r.stderr+"\n(run: "+err.Error()+")"
		}
		done <- r
	}()
	return func() result { return <-done }
}

// TestMultiHost runs three --virt none hosts and two replicas on one
// store, a single Redis and a Redis Cluster.
func TestMultiHost(t *testing.T) {
	t.Parallel()
	for k, tc := range []struct {
		name  string
		store func(testing.TB) string
	}{
		{"redis", testenv.StartRedis},
		{"redis-cluster", func(t testing.TB) string { return testenv.ClusterURL(testenv.StartRedisCluster(t)) }},
	} {
		t.Run(tc.name, func(t *testing.T) { testMultiHost(t, tc.store(t), k) })
	}
}

func testMultiHost(t *testing.T, storeURL string, k int) {
	names := []string{"host-a", "host-b", "host-c"}
	hosts := map[string]*daemon{}
	for _, h := range names {
		hosts[h] = startDaemon(t, daemonOptions{Store: storeURL, Args: append([]string{"--virt", "none"}, hostArgs(h)...)})
	}
	replicas := []*replicaProc{startReplica(t, storeURL), startReplica(t, storeURL)}

	// Each host applies two instances of its own, on addresses of their
	// own (127.10.<case>.<host><n>).
	var insts []mhInstance
	byName := map[string]mhInstance{}
	for i, h := range names {
		for n := 1; n <= 2; n++ {
			in := newMHInstance(fmt.Sprintf("web-%c%d", 'a'+i, n),
				fmt.Sprintf("6d0c5e1a-%04d-4000-8000-%012d", k, (i+1)*10+n),
				fmt.Sprintf("127.10.%d.%d", k, (i+1)*10+n), h)
			var got struct {
				Host string `json:"host"`
			}
			decodeJSON(t, hosts[h].MustCtl("instance", "apply", "-f", writeSpec(t, in.spec), "--output", "json").stdout, &got)
			if got.Host != h {
				t.Errorf("apply %s on %s: host %q in the record", in.name, h, got.Host)
			}
			insts = append(insts, in)
			byName[in.name] = in
		}
	}

	// Every guest reads its own metadata through either replica.
	for _, in := range insts {
		for j, rp := range replicas {
			readAsGuest(t, in, fmt.Sprintf("replica %d", j+1), rp.URL())
		}
	}

	// Every host is up, with its two instances (counted at its next beat).
	waitHosts(t, hosts["host-a"], "three hosts up with two instances each", func(hs map[string]hostJSON) bool {
		for _, h := range names {
			if s, ok := hs[h]; !ok || s.Down || s.Instances != 2 {
				return false
			}
		}
		return len(hs) == 3
	})
	checkLines(t, "host list", hosts["host-b"].MustCtl("host", "list").stdout,
		`HOST\s+STATUS\s+INSTANCES\s+LAST SEEN\s+STARTED\s+VERSION`,
		`host-a\s+up\s+2\s+.*`, `host-b\s+up\s+2\s+.*`, `host-c\s+up\s+2\s+.*`)

	// Each host lists its own instances only.
	for _, h := range names {
		var list []struct {
			Spec struct {
				Name string `json:"name"`
			} `json:"spec"`
			Host string `json:"host"`
		}
		decodeJSON(t, hosts[h].MustCtl("instance", "list", "--output", "json").stdout, &list)
		if len(list) != 2 {
			t.Errorf("instance list on %s: %d instances, want its own 2: %+v", h, len(list), list)
		}
		for _, l := range list {
			if l.Host != h || byName[l.Spec.Name].owner != h {
				t.Errorf("instance list on %s shows %s of host %q", h, l.Spec.Name, l.Host)
			}
		}
	}

	// Every cross-host command is refused naming the owner and changes
	// nothing: the record (revision, metadata version, host), the
	// document the replicas serve, the owner's config drive.
	var refused refusals
	attempted := 0
	for _, h := range names {
		for _, in := range insts {
			if in.owner == h {
				continue
			}
			attempted += len(crossHostCommands(t, in, ""))
			owner := hosts[in.owner]
			before := showJSON(t, owner, in.name)
			docBefore := getFrom(t, in.addr, owner.URL()+"/openstack/latest/meta_data.json").body
			out := filepath.Join(t.TempDir(), "drive.iso")
			for _, args := range crossHostCommands(t, in, out) {
				refused.expectRefused(t, hosts[h], in.name, in.owner, args...)
			}
			if after := showJSON(t, owner, in.name); after != before {
				t.Errorf("%s's commands changed %s:\nbefore:\n%s\nafter:\n%s", h, in.name, before, after)
			}
			if doc := getFrom(t, in.addr, owner.URL()+"/openstack/latest/meta_data.json").body; !bytes.Equal(doc, docBefore) {
				t.Errorf("%s's commands republished %s's metadata:\nbefore:\n%s\nafter:\n%s", h, in.name, docBefore, doc)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("configdrive build of %s on %s wrote %s (stat: %v)", in.name, h, out, err)
			}
			if _, err := os.Stat(filepath.Join(owner.DataDir, "instances", in.name, "disk.config")); err != nil {
				t.Errorf("%s's config drive on %s after %s's commands: %v", in.name, in.owner, h, err)
			}
			if _, err := os.Stat(filepath.Join(hosts[h].DataDir, "instances", in.name)); !os.IsNotExist(err) {
				t.Errorf("%s's commands made a directory for %s (stat: %v)", h, in.name, err)
			}
		}
	}
	if refused.n != attempted {
		t.Errorf("%d of %d cross-host commands refused as expected", refused.n, attempted)
	}
	t.Logf("cross-host commands refused while every host was up: %d", refused.n)

	// host-a dies (SIGKILL: no last heartbeat). Its heartbeat goes stale
	// and it is marked down; the others stay up.
	hosts["host-a"].proc.Kill()
	waitHosts(t, hosts["host-b"], "host-a down (silent, not stopped) and host-b, host-c up", func(hs map[string]hostJSON) bool {
		return hs["host-a"].Down && !hs["host-a"].Stopped && !hs["host-b"].Down && !hs["host-c"].Down
	})
	checkLines(t, "host list after host-a died", hosts["host-c"].MustCtl("host", "list").stdout, `host-a\s+down\s+2\s+.*`)

	// Its instances are still served by both replicas.
	for _, in := range insts {
		for j, rp := range replicas {
			readAsGuest(t, in, fmt.Sprintf("replica %d after host-a died", j+1), rp.URL())
		}
	}

	// host-b and host-c race to adopt web-a1: exactly one wins, and the
	// record names the winner.
	wait := map[string]func() result{
		"host-b": ctlAsync(hosts["host-b"], "instance", "adopt", "web-a1"),
		"host-c": ctlAsync(hosts["host-c"], "instance", "adopt", "web-a1"),
	}
	results := map[string]result{"host-b": wait["host-b"](), "host-c": wait["host-c"]()}
	var winners []string
	for h, r := range results {
		if r.code == 0 {
			winners = append(winners, h)
		}
	}
	if len(winners) != 1 {
		t.Fatalf("adopt race: %d winners, want exactly 1\nhost-b: %s\nhost-c: %s", len(winners), results["host-b"], results["host-c"])
	}
	winner, loser := winners[0], "host-b"
	if winner == "host-b" {
		loser = "host-c"
	}
	t.Logf("adopt race: %s won; %s: %s", winner, loser, strings.TrimSpace(results[loser].stderr))
	// The loser lost the compare-and-swap, or read the record after the
	// winner wrote it: either way its refusal names the winner.
	if !strings.Contains(results[loser].stderr, "web-a1 lives on "+winner) {
		t.Errorf("adopt race: the loser's refusal does not name the winner %s: %s", winner, results[loser])
	}
	checkLines(t, "adopt", results[winner].stdout, regexp.QuoteMeta("instance web-a1 now lives on "+winner)+`.*`)
	var adopted struct {
		Host        string `json:"host"`
		ConfigDrive string `json:"config_drive"`
	}
	decodeJSON(t, showJSON(t, hosts[loser], "web-a1"), &adopted)
	if adopted.Host != winner {
		t.Errorf("web-a1 after the adopt race lives on %q, want the winner %s", adopted.Host, winner)
	}
	decodeJSON(t, showJSON(t, hosts[winner], "web-a1"), &adopted)
	if want := filepath.Join(hosts[winner].DataDir, "instances", "web-a1", "disk.config"); adopted.ConfigDrive != want {
		t.Errorf("web-a1's config drive on %s after adopt: %q, want %s", winner, adopted.ConfigDrive, want)
	}
	a1 := byName["web-a1"]
	a1.owner = winner
	// Now the loser is refused naming the winner; the winner manages it.
	refused.expectRefused(t, hosts[loser], "web-a1", winner, "instance", "delete", "web-a1")
	refused.expectRefused(t, hosts[loser], "web-a1", winner, "instance", "adopt", "web-a1")
	hosts[winner].Apply(a1.spec)
	for j, rp := range replicas {
		readAsGuest(t, a1, fmt.Sprintf("replica %d after the adopt", j+1), rp.URL())
	}

	// --all-hosts lists every instance with its host.
	checkLines(t, "instance list --all-hosts", hosts["host-c"].MustCtl("instance", "list", "--all-hosts").stdout,
		`NAME\s+UUID\s+HOST\s+ADDRESSES\s+DISKS\s+NICS\s+SHARES\s+REVISION`,
		`web-a1\s+\S+\s+`+winner+`\s+.*`, `web-a2\s+\S+\s+host-a\s+.*`,
		`web-b1\s+\S+\s+host-b\s+.*`, `web-b2\s+\S+\s+host-b\s+.*`,
		`web-c1\s+\S+\s+host-c\s+.*`, `web-c2\s+\S+\s+host-c\s+.*`)

	// An admin removes the dead host's other instance from the store; the
	// command says what it could not clean, and the replicas stop serving
	// it.
	r := hosts["host-c"].MustCtl("instance", "delete", "web-a2", "--force-from-store")
	checkLines(t, "delete --force-from-store", r.stdout,
		regexp.QuoteMeta("instance web-a2 removed from the store; not cleaned (out of this host's reach):"),
		`\s+- .*on host host-a.*`, `\s+- DHCP host entries of web-a2 in host host-a's libvirt network`)
	for _, h := range []string{"host-b", "host-c"} {
		if r := hosts[h].Ctl("instance", "show", "web-a2"); r.code == 0 || !strings.Contains(r.stderr, "not found") {
			t.Errorf("show web-a2 on %s after the forced delete: %s", h, r)
		}
	}
	for j, rp := range replicas {
		deadline := time.Now().Add(eventDeadline)
		for {
			got := getFrom(t, byName["web-a2"].addr, rp.URL()+"/openstack/latest/meta_data.json")
			if got.status == http.StatusNotFound {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %d still answers the guest of web-a2 %d within %s of the forced delete", j+1, got.status, eventDeadline)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// Retiring a host cleanly: host-c stops, its last heartbeat says so,
	// and host-b can adopt its instances at once (no wait for silence).
	hosts["host-c"].Stop()
	waitHosts(t, hosts["host-b"], "host-c stopped", func(hs map[string]hostJSON) bool { return hs["host-c"].Stopped && hs["host-c"].Down })
	checkLines(t, "host list after host-c stopped", hosts["host-b"].MustCtl("host", "list").stdout, `host-c\s+down \(stopped\)\s+.*`)
	hosts["host-b"].MustCtl("instance", "adopt", "web-c1")
	wantB := 3
	if winner == "host-b" {
		wantB = 4
	}
	waitHosts(t, hosts["host-b"], fmt.Sprintf("host-b with %d instances", wantB), func(hs map[string]hostJSON) bool {
		return !hs["host-b"].Down && hs["host-b"].Instances == wantB
	})
	t.Logf("cross-host commands refused in all: %d", refused.n)
}

// TestMultiHostLibvirt runs a --virt libvirt host next to a --virt none
// host on one Redis: the libvirt host, whose reconciler marks its own
// instances missing when their domains are gone, never marks the other
// host's instance missing (it has no domain in this libvirt), on
// event-driven passes or on the full pass of a start.
func TestMultiHostLibvirt(t *testing.T) {
	t.Parallel()
	uri := testenv.RequireLibvirt(t)
	storeURL := testenv.StartRedis(t)
	none := startDaemon(t, daemonOptions{Store: storeURL, Args: append([]string{"--virt", "none"}, hostArgs("host-n")...)})
	// "a-" sorts before the libvirt host's "vmeta-test-" domain: a full
	// reconcile pass (instances in name order) has passed the other
	// host's instance once it logs its own.
	other := newMHInstance("a-other", "5b7e2c10-0000-4000-8000-000000000001", guestAddr(), "host-n")
	none.Apply(other.spec)

	lv := startLibvirtDaemon(t, uri, append([]string{"--store", storeURL}, hostArgs("host-l")...)...)
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	lv.Apply(fmt.Sprintf("name: %s\naddresses: [%s]\ndisks: [{name: vda, size: 8M, tag: root}]\n", name, guestAddr()))

	otherMarked := regexp.MustCompile(`(?m)^.*missing.*` + regexp.QuoteMeta(other.name) + `\b.*$`)
	notMissing := func(where string, d *daemon) {
		t.Helper()
		var shown struct {
			Host  string `json:"host"`
			State string `json:"state"`
		}
		decodeJSON(t, showJSON(t, d, other.name), &shown)
		if shown.Host != "host-n" || shown.State != "" {
			t.Errorf("%s: show %s on host-l: host %q state %q, want host-n and no state", where, other.name, shown.Host, shown.State)
		}
		var list []struct {
			Spec struct {
				Name string `json:"name"`
			} `json:"spec"`
			Host  string `json:"host"`
			State string `json:"state"`
		}
		decodeJSON(t, d.MustCtl("instance", "list", "--all-hosts", "--output", "json").stdout, &list)
		found := false
		for _, l := range list {
			if l.Spec.Name == other.name {
				found = true
				if l.Host != "host-n" || l.State != "" {
					t.Errorf("%s: list --all-hosts on host-l: %s host %q state %q, want host-n and no state", where, other.name, l.Host, l.State)
				}
			}
		}
		if !found {
			t.Errorf("%s: list --all-hosts on host-l lacks %s", where, other.name)
		}
		if otherMarked.MatchString(d.Log()) {
			t.Errorf("%s: host-l marked %s missing:\n%s", where, other.name, d.Log())
		}
		if r := getFrom(t, other.addr, lv.URL()+"/openstack/latest/meta_data.json"); r.status != http.StatusOK {
			t.Errorf("%s: guest of %s through host-l's metadata service: status %d", where, other.name, r.status)
		}
	}
	notMissing("after host-l started", lv)

	var refused refusals
	for _, args := range [][]string{
		{"instance", "start", other.name},
		{"instance", "delete", other.name},
		{"instance", "attach-disk", other.name, "--tag", "extra"},
	} {
		refused.expectRefused(t, lv, other.name, "host-n", args...)
	}

	// Remove host-l's own domain behind its back: the event-driven pass
	// marks its own instance missing, and only it.
	mustVirsh(t, uri, "undefine", name)
	marked := regexp.MustCompile(`instance marked missing.*name=` + regexp.QuoteMeta(name))
	waitLog := func(d *daemon) {
		t.Helper()
		deadline := time.Now().Add(eventDeadline)
		for !marked.MatchString(d.Log()) {
			if time.Now().After(deadline) {
				t.Fatalf("host-l did not mark %s missing within %s; its log:\n%s", name, eventDeadline, d.Log())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitLog(lv)
	notMissing("after an event-driven reconcile", lv)

	// A restart reconciles every instance once, in name order.
	lv = lv.Restart()
	waitLog(lv)
	notMissing("after the full reconcile pass of a restart", lv)
	t.Logf("cross-host commands refused by the libvirt host: %d", refused.n)

	// The --virt none host still has its instance, untouched.
	var shown struct {
		Host     string `json:"host"`
		Revision int64  `json:"revision"`
	}
	decodeJSON(t, showJSON(t, none, other.name), &shown)
	if shown.Host != "host-n" || shown.Revision != 1 {
		t.Errorf("%s on host-n after all that: host %q revision %d, want host-n revision 1", other.name, shown.Host, shown.Revision)
	}
	lv.MustCtl("instance", "delete", name)
}
