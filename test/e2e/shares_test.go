package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/shares"
	"github.com/vmeta/vmeta/internal/testenv"
)

// shareDir makes a directory with a file under the daemon's default share
// root.
func shareDir(t *testing.T, d *daemon, name string) string {
	t.Helper()
	dir := filepath.Join(d.DataDir, "shares", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func statusOf(err error) int {
	var e *types.Error
	if errors.As(err, &e) {
		return e.StatusCode()
	}
	return 0
}

// waitUntil polls cond until it holds (at most a minute: the reconciler
// runs at start-up).
func waitUntil(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last: %s", what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// shareDomain is a unique libvirt domain name for a share test, removed
// when the test ends. Shares are attached to SHUTOFF instances only, so
// the share tests run `hostctl serve --virt libvirt`.
func shareDomain(t *testing.T, uri string) string {
	t.Helper()
	name := "shares-" + strings.TrimPrefix(testenv.UniqueDomainName(t), "vmeta-test-")
	testenv.CleanupDomain(t, uri, name)
	return name
}

// TestSharesCLI: the share commands end to end against `hostctl serve`:
// create, list, show, attach, mappings, delete refused while attached
// (409 naming the instance), detach, delete; --output json; the guest's
// metadata lists the share while it is attached.
func TestSharesCLI(t *testing.T) {
	t.Parallel()
	uri := testenv.RequireLibvirt(t)
	d := startLibvirtDaemon(t, uri)
	web1 := shareDomain(t, uri)
	d.Apply("name: " + web1 + "\nproject_id: demo\naddresses: [127.0.0.1]\n")
	dir := shareDir(t, d, "data")
	id := "7f3c9a52-1b0e-4a8e-8f7e-5d3c2b1a0f99"
	out := d.MustCtl("share", "create", "--id", id, "--proto", "local", "--export", dir, "--project", "demo", "--name", "data")
	if !strings.Contains(out.stdout, "share "+id+" created") {
		t.Errorf("create: %s", out)
	}
	d.MustCtl("share", "attach", web1, id, "--tag", "data")
	var ms types.ServerSharesBody
	decodeJSON(t, d.MustCtl("share", "mappings", web1, "--output", "json").stdout, &ms)
	if len(ms.Shares) != 1 || ms.Shares[0].Status != types.ShareInactive || ms.Shares[0].Tag != "data" || ms.Shares[0].ExportLocation != dir {
		t.Errorf("mappings: %+v", ms)
	}
	md := string(mustGet(t, d.URL()+"/openstack/latest/meta_data.json"))
	if !strings.Contains(md, `"type":"share","bus":"none","address":"none","share_id":"`+id+`","tag":"data"`) {
		t.Errorf("metadata lacks the share device:\n%s", md)
	}
	r := d.Ctl("share", "delete", id)
	if r.code != 1 || !strings.Contains(r.stderr, "locked") || !strings.Contains(r.stderr, web1) {
		t.Errorf("delete of an attached share: %s", r)
	}
	r = d.Ctl("share", "attach", web1, id)
	if r.code != 1 || !strings.Contains(r.stderr, "already attached") {
		t.Errorf("second attach: %s", r)
	}
	r = d.Ctl("share", "attach", web1, "not-a-uuid")
	if r.code != 1 || !strings.Contains(r.stderr, "must be a UUID") {
		t.Errorf("malformed uuid: %s", r)
	}
	var sh types.ShareBody
	decodeJSON(t, d.MustCtl("share", "show", id, "--output", "json").stdout, &sh)
	if !sh.Share.Locked || sh.Share.Name != "data" {
		t.Errorf("show: %+v", sh)
	}
	if out := d.MustCtl("share", "list"); !strings.Contains(out.stdout, id) {
		t.Errorf("list: %s", out)
	}
	d.MustCtl("share", "detach", web1, id)
	if md := string(mustGet(t, d.URL()+"/openstack/latest/meta_data.json")); strings.Contains(md, id) {
		t.Errorf("metadata still lists the detached share:\n%s", md)
	}
	d.MustCtl("share", "delete", id)
	if r := d.Ctl("share", "show", id); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("show after delete: %s", r)
	}
	// The audit stream: attached, then detached, without the export.
	evs := d.MustCtl("events", "list", "shares", "--output", "json").stdout
	if a, dt := strings.Index(evs, "share.attached"), strings.Index(evs, "share.detached"); a < 0 || dt < a || strings.Contains(evs, dir) ||
		!strings.Contains(evs, `\"tag\":\"data\"`) && !strings.Contains(evs, `"tag": "data"`) && !strings.Contains(evs, `"tag":"data"`) {
		t.Errorf("events list shares:\n%s", evs)
	}
	if strings.Contains(d.Log(), dir) {
		t.Errorf("the daemon's log carries the export location %s", dir)
	}
}

// TestSharesKilledBetweenSteps kills `hostctl serve` (SIGKILL) between
// each two steps of an attach and of a detach, restarts it, and checks
// that the start-up reconciler converges: an interrupted attach ends
// inactive (locked, in the spec and the metadata, and with libvirt in the
// domain's persistent XML), an interrupted detach ends with no trace. It
// runs with the real libvirtd (without a hypervisor nothing is attached).
func TestSharesKilledBetweenSteps(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"libvirt"} {
		t.Run(mode, func(t *testing.T) {
			var uri string
			var args []string
			if mode == "libvirt" {
				uri = testenv.RequireLibvirt(t)
				requireVirtServe(t)
				args = []string{"--virt", "libvirt", "--libvirt-uri", uri, "--domain-type", "qemu", "--domain-memory", "128", "--reconcile-interval", "0"}
			}
			for _, tc := range []struct {
				step   string
				detach bool
			}{
				{step: "lock"}, {step: "apply"}, {step: "inactive"},
				{step: "detach-apply", detach: true}, {step: "unlock", detach: true}, {step: "delete-mapping", detach: true},
			} {
				t.Run(tc.step, func(t *testing.T) { killBetweenSteps(t, uri, args, tc.step, tc.detach) })
			}
		})
	}
}

func killBetweenSteps(t *testing.T, uri string, args []string, step string, detach bool) {
	// The pause exists only in a hostctl built with -tags vmetacrash.
	d := startDaemon(t, daemonOptions{Args: args, Env: []string{shares.PauseEnv + "=" + step}, Bin: crashHostctl(t)})
	name := "web-1"
	if uri != "" {
		name = "shares-" + strings.TrimPrefix(testenv.UniqueDomainName(t), "vmeta-test-")
		testenv.CleanupDomain(t, uri, name)
	}
	d.Apply("name: " + name + "\nproject_id: demo\naddresses: [127.0.0.1]\nconfig_drive: false\n")
	dir := shareDir(t, d, "data")
	var sh types.ShareBody
	decodeJSON(t, d.MustCtl("share", "create", "--proto", "local", "--export", dir, "--project", "demo", "--output", "json").stdout, &sh)
	id := sh.Share.ID
	op := []string{"share", "attach", name, id, "--tag", "data"}
	if detach {
		d.MustCtl(op...)
		op = []string{"share", "detach", name, id}
	}
	done := make(chan result, 1)
	go func() { done <- hostctl(t, nil, append(op, "--socket", d.Socket)...) }()
	waitUntil(t, "the daemon to pause at "+step, func() (bool, string) {
		return strings.Contains(d.Log(), `msg="share operation paused for a test"`) && strings.Contains(d.Log(), "step="+step), ""
	})
	d.proc.Kill()
	if r := <-done; r.code == 0 {
		t.Fatalf("%v succeeded although hostctl was killed: %s", op, r)
	}

	d2 := startDaemon(t, daemonOptions{DataDir: d.DataDir, Args: args})
	c := client.NewUnix(d2.Socket)
	ctx := context.Background()
	waitUntil(t, "the reconciler to converge", func() (bool, string) {
		ms, err := c.ServerShares(ctx, name)
		if err != nil {
			return false, err.Error()
		}
		s, err := c.Share(ctx, id)
		if err != nil {
			return false, err.Error()
		}
		inst, err := c.Get(ctx, name)
		if err != nil {
			return false, err.Error()
		}
		inMD := false
		for _, dev := range inst.Devices {
			inMD = inMD || dev.ShareID == id
		}
		state := fmt.Sprintf("mappings %+v locked %v in metadata %v", ms, s.Locked, inMD)
		if detach {
			return len(ms) == 0 && !s.Locked && !inMD, state
		}
		return len(ms) == 1 && ms[0].Status == types.ShareInactive && s.Locked && inMD, state
	})
	md := string(mustGet(t, d2.URL()+"/openstack/latest/meta_data.json"))
	if strings.Contains(md, id) == detach {
		t.Errorf("published metadata and the mapping disagree:\n%s", md)
	}
	if uri != "" {
		xml := mustVirsh(t, uri, "dumpxml", "--inactive", name)
		if strings.Contains(xml, "<target dir='data'/>") == detach {
			t.Errorf("the domain's persistent XML disagrees with the mapping (detach %v):\n%s", detach, xml)
		}
	}
}

// TestSharesRaceTwoHosts: two hostctl processes (hosts a and b) on one
// real Redis race to attach a share (a, to its instance) and to delete it
// (b), round after round. The lock holds: never both; an attach that
// wins makes the delete 409, a delete that wins makes the attach 404,
// and no mapping is ever left to a deleted share. The counts are printed.
func TestSharesRaceTwoHosts(t *testing.T) {
	t.Parallel()
	url := testenv.StartRedis(t)
	uri := testenv.RequireLibvirt(t)
	requireVirtServe(t)
	// Host a attaches (to a SHUTOFF domain); host b only deletes shares.
	a := startDaemon(t, daemonOptions{Store: url, Args: []string{"--host", "host-a", "--virt", "libvirt", "--libvirt-uri", uri, "--domain-type", "qemu", "--domain-memory", "128", "--reconcile-interval", "0"}})
	b := startDaemon(t, daemonOptions{Store: url, Args: []string{"--host", "host-b"}})
	race1 := shareDomain(t, uri)
	a.Apply("name: " + race1 + "\nproject_id: demo\nconfig_drive: false\n")
	dir := shareDir(t, a, "data")
	if err := os.MkdirAll(filepath.Join(b.DataDir, "shares"), 0o755); err != nil {
		t.Fatal(err)
	}
	ca, cb := client.NewUnix(a.Socket), client.NewUnix(b.Socket)
	ctx := context.Background()

	// Another host's instance: host b may not attach to it (409).
	sh, err := ca.CreateShare(ctx, types.ShareCreateRequest{Proto: "local", ExportLocation: dir, ProjectID: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cb.AttachShare(ctx, race1, types.ServerShareAttach{ShareID: sh.ID}); statusOf(err) != 409 || !strings.Contains(err.Error(), "host-a") {
		t.Errorf("attach from the other host: %v", err)
	}
	if err := cb.DeleteShare(ctx, sh.ID); err != nil {
		t.Fatal(err)
	}

	const rounds = 30
	var attachWon, deleteWon int
	for i := range rounds {
		sh, err := ca.CreateShare(ctx, types.ShareCreateRequest{Proto: "local", ExportLocation: dir, ProjectID: "demo"})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var attachErr, deleteErr error
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_, attachErr = ca.AttachShare(ctx, race1, types.ServerShareAttach{ShareID: sh.ID})
		}()
		// The delete starts 0-9 ms after the attach, so that both orders
		// happen; what is checked holds for any timing.
		delay := time.Duration(i%10) * time.Millisecond
		go func() { defer wg.Done(); <-start; time.Sleep(delay); deleteErr = cb.DeleteShare(ctx, sh.ID) }()
		close(start)
		wg.Wait()
		switch {
		case attachErr == nil && deleteErr == nil:
			t.Fatalf("round %d: both the attach and the delete succeeded", i)
		case attachErr == nil:
			if statusOf(deleteErr) != 409 || !strings.Contains(deleteErr.Error(), race1) {
				t.Fatalf("round %d: attach won, delete answered %v (want 409 naming race-1)", i, deleteErr)
			}
			attachWon++
			if _, err := ca.DetachShare(ctx, race1, sh.ID, false); err != nil {
				t.Fatal(err)
			}
			if err := cb.DeleteShare(ctx, sh.ID); err != nil {
				t.Fatalf("round %d: delete after detach: %v", i, err)
			}
		case deleteErr == nil:
			if statusOf(attachErr) != 404 {
				t.Fatalf("round %d: delete won, attach answered %v (want 404)", i, attachErr)
			}
			deleteWon++
		default:
			t.Fatalf("round %d: both failed: attach %v, delete %v", i, attachErr, deleteErr)
		}
		if ms, err := ca.ServerShares(ctx, race1); err != nil || len(ms) != 0 {
			t.Fatalf("round %d: mappings left %+v, %v", i, ms, err)
		}
	}
	t.Logf("FIGURE shares race, %d rounds, two hostctl processes on one Redis: attach won %d (delete 409), delete won %d (attach 404), both won 0", rounds, attachWon, deleteWon)
	if inst, err := ca.Get(ctx, race1); err != nil || len(inst.Spec.Shares) != 0 {
		t.Errorf("instance spec still has shares: %+v %v", inst, err)
	}
}

// TestSharesInSpec: a share the instance spec names is a share of the
// registry, attached by `hostctl instance apply` through the share model:
// listed by `hostctl share mappings` (GET /v1/servers/{id}/shares),
// locking the share, in the domain and the metadata. An unknown share, a
// source written in the spec, and any spec share under --virt none are
// refused with the field and nothing is stored. Issue 20, item 16.
func TestSharesInSpec(t *testing.T) {
	t.Parallel()
	uri := testenv.RequireLibvirt(t)
	d := startLibvirtDaemon(t, uri)
	name := shareDomain(t, uri)
	dir := shareDir(t, d, "data")
	const id = "7f3c9a52-1b0e-4a8e-8f7e-5d3c2b1a0f99"
	d.MustCtl("share", "create", "--id", id, "--proto", "local", "--export", dir, "--project", "demo")

	r := d.Ctl("instance", "apply", "-f", writeSpec(t, "name: "+name+"\nproject_id: demo\nshares: [{share_id: 6c1e4f0a-8d7b-4c2e-9a3f-5b6d7e8f9a0b, tag: data}]\n"))
	if r.code != 1 || !strings.Contains(r.stderr, "shares[0].share_id") || !strings.Contains(r.stderr, "is not a share of the share registry") {
		t.Errorf("apply naming an unknown share: %s", r)
	}
	r = d.Ctl("instance", "apply", "-f", writeSpec(t, "name: "+name+"\nproject_id: demo\nshares: [{share_id: "+id+", tag: data, source: /srv/webdata}]\n"))
	if r.code != 1 || !strings.Contains(r.stderr, "shares[0].source") || !strings.Contains(r.stderr, "outside the share root") {
		t.Errorf("apply with a source outside the share root: %s", r)
	}
	if r := d.Ctl("instance", "show", name); r.code != 1 {
		t.Fatalf("a refused spec created the instance: %s", r)
	}

	d.Apply("name: " + name + "\nproject_id: demo\naddresses: [127.0.0.1]\nshares: [{share_id: " + id + ", tag: data}]\n")
	var ms types.ServerSharesBody
	decodeJSON(t, d.MustCtl("share", "mappings", name, "--output", "json").stdout, &ms)
	if len(ms.Shares) != 1 || ms.Shares[0].ShareID != id || ms.Shares[0].Status != types.ShareInactive || ms.Shares[0].Tag != "data" || ms.Shares[0].ExportLocation != dir {
		t.Errorf("mappings of the spec's share: %+v", ms)
	}
	if r := d.Ctl("share", "delete", id); r.code != 1 || !strings.Contains(r.stderr, "locked") || !strings.Contains(r.stderr, name) {
		t.Errorf("delete of a share a spec attached: %s", r)
	}
	if xml := mustVirsh(t, uri, "dumpxml", "--inactive", name); !strings.Contains(xml, "<source dir='"+dir+"'/>") || !strings.Contains(xml, "<target dir='data'/>") {
		t.Errorf("the domain lacks the share:\n%s", xml)
	}
	md := string(mustGet(t, d.URL()+"/openstack/latest/meta_data.json"))
	if !strings.Contains(md, `"share_id":"`+id+`","tag":"data"`) {
		t.Errorf("metadata lacks the share:\n%s", md)
	}

	// One share tag rule, with its reason, at every input: the spec and
	// the attach request, from the CLI (issue 20, item 19).
	const why = "a share tag is at most 36 bytes, the size of the tag field of QEMU's virtio-fs device"
	long := strings.Repeat("t", 40)
	if r := d.Ctl("instance", "apply", "-f", writeSpec(t, "name: "+name+"\nproject_id: demo\nshares: [{share_id: "+id+", tag: "+long+"}]\n")); r.code != 1 || !strings.Contains(r.stderr, "shares[0].tag") || !strings.Contains(r.stderr, why) {
		t.Errorf("spec with a 40-byte share tag: %s", r)
	}
	if r := d.Ctl("share", "attach", name, id, "--tag", long); r.code != 1 || !strings.Contains(r.stderr, "share.tag") || !strings.Contains(r.stderr, why) {
		t.Errorf("attach with a 40-byte tag: %s", r)
	}

	// Without a hypervisor an instance has no SHUTOFF state to attach in.
	n := startDaemon(t, daemonOptions{})
	ndir := shareDir(t, n, "data")
	n.MustCtl("share", "create", "--id", id, "--proto", "local", "--export", ndir, "--project", "demo")
	r = n.Ctl("instance", "apply", "-f", writeSpec(t, "name: web-1\nproject_id: demo\nshares: [{share_id: "+id+", tag: webdata}]\n"))
	if r.code != 1 || !strings.Contains(r.stderr, "no hypervisor state (hostctl serve runs with --virt none)") {
		t.Errorf("apply with a share under --virt none: %s", r)
	}
	if r := n.Ctl("instance", "show", "web-1"); r.code != 1 {
		t.Errorf("the refused spec created the instance: %s", r)
	}
}
