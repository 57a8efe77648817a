package shares

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
)

// cephHost is a host name no other test run uses on the shared cluster.
func cephHost(t *testing.T, base string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return base + "-" + hex.EncodeToString(b[:])
}

// realCephX is a CephX on the real cluster for host, with a real key
// manager on st, and the cluster's clients of host removed at the end.
func realCephX(t *testing.T, c *testenv.Ceph, st store.Store, host string) *CephX {
	t.Helper()
	km, err := keys.Open(context.Background(), st, t.TempDir(), keys.Options{Host: host})
	if err != nil {
		t.Fatal(err)
	}
	cx := NewCephX(CephXOptions{Host: host, Store: st, Keys: km, RunDir: filepath.Join(t.TempDir(), "run")})
	t.Cleanup(func() {
		out, err := c.AdminErr("auth", "ls", "--format", "json")
		if err != nil {
			return
		}
		var ls struct {
			AuthDump []authEntry `json:"auth_dump"`
		}
		_ = json.Unmarshal([]byte(out), &ls)
		for _, e := range ls.AuthDump {
			if strings.HasPrefix(e.Entity, "client.vmeta-"+host+".") {
				_, _ = c.AdminErr("auth", "rm", e.Entity)
			}
		}
	})
	return cx
}

// cephCaps returns the caps of a client of the real cluster (nil when it
// does not exist).
func cephCaps(t *testing.T, c *testenv.Ceph, client string) map[string]string {
	t.Helper()
	out, err := c.AdminErr("auth", "get", client, "--format", "json")
	if err != nil {
		if strings.Contains(err.Error(), "exit status 2") || strings.Contains(err.Error(), "ENOENT") || strings.Contains(err.Error(), "failed to find") {
			return nil
		}
		t.Fatalf("auth get %s: %v", client, err)
	}
	var es []authEntry
	if err := json.Unmarshal([]byte(out), &es); err != nil || len(es) == 0 {
		t.Fatalf("auth get %s: %q, %v", client, out, err)
	}
	return es[0].Caps
}

// TestCephFSRealCluster runs CephFS shares against the real single-node
// cluster (test/ceph/cluster): ceph-auth with a bad and a good admin
// keyring; the host's client created at generation 1 with no path; a
// share created (and one naming an unknown file system refused); its path
// granted on attach; mounted with ceph-fuse on start (the admin's file
// read, a file written, the keyring file gone from the runtime
// directory); a second host mounting the same share with its own client;
// a rotation while the share is mounted (the mount keeps generation 1,
// which is not pruned while it is used); unmounted on stop; the old
// generation pruned once unused; the path revoked only when the last
// holder on the last host lets go.
func TestCephFSRealCluster(t *testing.T) {
	c := testenv.CephCluster(t)
	ctx := context.Background()
	p := c.CephPath(t, "share")
	c.WithAdminMount(t, func(root string) {
		if err := os.WriteFile(filepath.Join(root, p, "hello.txt"), []byte("from ceph"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	st := stores(t)["bolt"](t)
	e := newEnv(t, st)
	hostA := cephHost(t, "a")
	cx := realCephX(t, c, st, hostA)
	e.svc.cephx, e.svc.mounts.ceph = cx, cx
	e.svc.mounts.run = ExecRunner{}
	e.svc.mounts.mountinfo = "/proc/self/mountinfo"

	// An admin keyring that does not authenticate: nothing stored.
	bad := []byte("[client.admin]\n\tkey = AQBmyFdnAAAAABAAnotavalidkeyatallAAAAAAAAA==\n")
	if _, err := cx.ConfigureAdmin(ctx, bad, c.Mon); err == nil || !strings.Contains(err.Error(), "does not authenticate") || strings.Contains(err.Error(), "AQBmyFdn") {
		t.Fatalf("bad admin keyring: %v; want 'does not authenticate', the key not shown", err)
	}
	if cx.Configured(ctx) {
		t.Fatal("a bad admin keyring was recorded")
	}
	adminKeyring, err := os.ReadFile(c.AdminKeyring)
	if err != nil {
		t.Fatal(err)
	}
	ver, err := cx.ConfigureAdmin(ctx, adminKeyring, c.Mon)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ver, "16.") && !strings.HasPrefix(ver, "1") {
		t.Errorf("ceph version %q", ver)
	}
	gen1 := ClientName(hostA, 1)
	if caps := cephCaps(t, c, gen1); caps == nil || caps["mon"] != "allow r" || caps["mds"] != "" {
		t.Fatalf("%s caps %v: want mon 'allow r' and no path yet", gen1, caps)
	}

	export := c.Mon + ":" + p
	if _, err := e.svc.CreateShare(ctx, admin, types.ShareCreateRequest{ProjectID: "demo", Proto: ProtoCephFS, ExportLocation: export + ",fs=nope"}); err == nil || !strings.Contains(err.Error(), `no file system "nope"`) {
		t.Fatalf("unknown fs: %v", err)
	}
	sh, err := e.svc.CreateShare(ctx, admin, types.ShareCreateRequest{ProjectID: "demo", Proto: ProtoCephFS, ExportLocation: export + ",fs=" + c.FS})
	if err != nil {
		t.Fatal(err)
	}
	id := sh.ID
	u := e.instance("a", "demo")
	e.attach("a", id)
	if caps := cephCaps(t, c, gen1); !strings.Contains(caps["mds"], "path="+p) || !strings.Contains(caps["osd"], "data="+c.FS) {
		t.Fatalf("%s caps after attach %v: want the share's path", gen1, caps)
	}

	dir := e.svc.mounts.Dir(id)
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	if err := e.svc.PrepareStart(ctx, u); err != nil {
		t.Fatalf("start (ceph-fuse mount): %v", err)
	}
	e.svc.StartDone(ctx, u, nil)
	if b, err := os.ReadFile(filepath.Join(dir, "hello.txt")); err != nil || string(b) != "from ceph" {
		t.Fatalf("read through the host mount: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "from-host-a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(cx.runDir, "*")); len(left) != 0 {
		t.Errorf("runtime directory after the mount: %v; the keyring file must be gone", left)
	}
	if gens, _ := cx.MountGenerations(ctx); gens[id] != 1 {
		t.Errorf("mount generations %v: want share %s at 1", gens, id)
	}

	// A second host maps the same share: its own client, its own mount.
	hostB := cephHost(t, "b")
	cxB := realCephX(t, c, st, hostB)
	if _, err := cxB.ConfigureAdmin(ctx, adminKeyring, c.Mon); err != nil {
		t.Fatal(err)
	}
	if _, err := lock(ctx, st, id, Holder{Instance: "00000000-0000-4000-8000-0000000000bb", Name: "b", Host: hostB}); err != nil {
		t.Fatal(err)
	}
	exp, _ := ParseCephFSExport(e.share(id).Export)
	if err := cxB.Grant(ctx, id, exp); err != nil {
		t.Fatal(err)
	}
	dirB := filepath.Join(t.TempDir(), "b")
	if err := os.MkdirAll(dirB, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := cxB.Mount(ctx, id, exp, dirB); err != nil {
		t.Fatalf("host b mount: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dirB, "from-host-a.txt")); err != nil || string(b) != "a" {
		t.Errorf("host b reads host a's file: %q, %v", b, err)
	}
	if out, err := exec.Command("umount", dirB).CombinedOutput(); err != nil {
		t.Fatalf("umount %s: %v %s", dirB, err, out)
	}
	cxB.Unmounted(ctx, id)

	// Rotation while mounted: generation 2 made, generation 1 kept (the
	// mount uses it) even with keep 0.
	prior, _, err := cx.RotateTo(ctx, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	gen2 := ClientName(hostA, 2)
	if prior != 1 || cephCaps(t, c, gen1) == nil {
		t.Fatalf("after rotation with the mount on generation 1: prior %d, %s exists %v", prior, gen1, cephCaps(t, c, gen1) != nil)
	}
	if caps := cephCaps(t, c, gen2); !strings.Contains(caps["mds"], "path="+p) {
		t.Fatalf("%s caps %v: want the same paths as generation 1", gen2, caps)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "hello.txt")); err != nil || string(b) != "from ceph" {
		t.Fatalf("the generation-1 mount after the rotation: %q, %v", b, err)
	}

	// Stop: unmounted; the prune then deletes generation 1.
	e.svc.Stopped(ctx, u)
	if err := testenvMounted(dir); err == nil {
		t.Fatalf("%s still mounted after stop", dir)
	}
	if prior, err := cx.Prune(ctx, 0); err != nil || prior != 0 {
		t.Fatalf("prune: %d, %v", prior, err)
	}
	if cephCaps(t, c, gen1) != nil {
		t.Errorf("%s still in Ceph after the prune", gen1)
	}
	// The next start mounts with generation 2.
	if err := e.svc.PrepareStart(ctx, u); err != nil {
		t.Fatalf("start after rotation: %v", err)
	}
	if gens, _ := cx.MountGenerations(ctx); gens[id] != 2 {
		t.Errorf("mount generations %v: want share %s at 2", gens, id)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "hello.txt")); err != nil || string(b) != "from ceph" {
		t.Fatalf("read through the generation-2 mount: %q, %v", b, err)
	}
	e.svc.Stopped(ctx, u)

	// Detach on host a while host b still holds the share: no revoke.
	if _, err := e.svc.DetachShare(ctx, admin, "a", id, false); err != nil {
		t.Fatal(err)
	}
	if caps := cephCaps(t, c, gen2); !strings.Contains(caps["mds"], "path="+p) {
		t.Fatalf("%s caps %v after host a's detach while host b holds the share: revoked too early", gen2, caps)
	}
	// Host b's last holder goes (its detach's unlock and revoke): both
	// hosts' clients lose the path.
	u2, err := unlock(ctx, st, id, "00000000-0000-4000-8000-0000000000bb")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.revokeUnheld(ctx, u2); err != nil {
		t.Fatal(err)
	}
	for _, cl := range []string{gen2, ClientName(hostB, 1)} {
		if caps := cephCaps(t, c, cl); strings.Contains(caps["mds"], p) {
			t.Errorf("%s caps %v after the last holder on the last host: the path must be revoked", cl, caps)
		}
	}
}

// testenvMounted returns nil when dir is a mount point.
func testenvMounted(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	pts, err := mountPoints(strings.NewReader(string(b)))
	if err != nil {
		return err
	}
	for _, p := range pts {
		if p == dir {
			return nil
		}
	}
	return errors.New("not mounted")
}

// TestCephXRealCrashRecovery: one crash of the matrix on the real
// cluster — hostctl killed after Ceph created client.vmeta-H.2 and its key
// went to the key manager, before the record — then restarted: the
// rotation finishes with the same client and key (no second key minted,
// none orphaned), and `ceph auth ls` lists exactly the recorded
// generations.
func TestCephXRealCrashRecovery(t *testing.T) {
	c := testenv.CephCluster(t)
	ctx := context.Background()
	st := stores(t)["bolt"](t)
	host := cephHost(t, "crash")
	cx := realCephX(t, c, st, host)
	kr, err := os.ReadFile(c.AdminKeyring)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cx.ConfigureAdmin(ctx, kr, c.Mon); err != nil {
		t.Fatal(err)
	}
	cephxStep = func(s string) error {
		if s == "stored" {
			return errCrash
		}
		return nil
	}
	t.Cleanup(func() { cephxStep = func(string) error { return nil } })
	if _, _, err := cx.RotateTo(ctx, 2, 1); !errors.Is(err, errCrash) {
		t.Fatalf("rotation with a crash: %v", err)
	}
	key2 := cephKey(t, c, ClientName(host, 2))
	cephxStep = func(string) error { return nil }
	restarted := NewCephX(CephXOptions{Host: host, Store: st, Keys: cx.keys, RunDir: cx.runDir})
	prior, ver, err := restarted.RotateTo(ctx, 2, 1)
	if err != nil || prior != 1 || ver == "" {
		t.Fatalf("rotation after restart: prior %d, version %q, %v", prior, ver, err)
	}
	if got := cephKey(t, c, ClientName(host, 2)); got != key2 {
		t.Error("the restarted rotation minted a second key for generation 2")
	}
	out := c.Admin(t, "auth", "ls", "--format", "json")
	var ls struct {
		AuthDump []authEntry `json:"auth_dump"`
	}
	if err := json.Unmarshal([]byte(out), &ls); err != nil {
		t.Fatal(err)
	}
	var inCeph []string
	for _, e := range ls.AuthDump {
		if strings.HasPrefix(e.Entity, "client.vmeta-"+host+".") {
			inCeph = append(inCeph, e.Entity)
		}
	}
	if want := []string{ClientName(host, 1), ClientName(host, 2)}; strings.Join(inCeph, " ") != strings.Join(want, " ") {
		t.Errorf("ceph auth ls: %v, want %v", inCeph, want)
	}
	secs, err := cx.keys.List(ctx, CephKeysProject)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range secs {
		names = append(names, s.Name)
	}
	if len(names) != 3 {
		t.Errorf("key manager CephX secrets %v: want the admin's and generations 1 and 2", names)
	}
}

func cephKey(t *testing.T, c *testenv.Ceph, client string) string {
	t.Helper()
	var es []authEntry
	if err := json.Unmarshal([]byte(c.Admin(t, "auth", "get", client, "--format", "json")), &es); err != nil || len(es) == 0 {
		t.Fatalf("auth get %s: %v", client, err)
	}
	return es[0].Key
}

// TestCephFSRealMissingPath: a share whose path does not exist in CephFS
// fails its start with ceph-fuse's own reason (ENOENT), the mapping in
// error without the export, nothing left mounted and no mount record.
func TestCephFSRealMissingPath(t *testing.T) {
	c := testenv.CephCluster(t)
	ctx := context.Background()
	st := stores(t)["bolt"](t)
	e := newEnv(t, st)
	cx := realCephX(t, c, st, cephHost(t, "missing"))
	e.svc.cephx, e.svc.mounts.ceph = cx, cx
	cx.users = e.svc.mounts.Users
	e.svc.mounts.run = ExecRunner{}
	e.svc.mounts.mountinfo = "/proc/self/mountinfo"
	kr, err := os.ReadFile(c.AdminKeyring)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cx.ConfigureAdmin(ctx, kr, c.Mon); err != nil {
		t.Fatal(err)
	}
	missing := "/vmeta-test/does-not-exist-" + cephHost(t, "p")
	sh, err := e.svc.CreateShare(ctx, admin, types.ShareCreateRequest{ProjectID: "demo", Proto: ProtoCephFS, ExportLocation: c.Mon + ":" + missing})
	if err != nil {
		t.Fatal(err)
	}
	u := e.instance("a", "demo")
	e.attach("a", sh.ID)
	dir := e.svc.mounts.Dir(sh.ID)
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	err = e.svc.PrepareStart(ctx, u)
	if err == nil || !strings.Contains(err.Error(), "No such file or directory") || strings.Contains(err.Error(), missing) || strings.Contains(err.Error(), c.Mon) {
		t.Fatalf("start with a missing CephFS path: %v; want ceph-fuse's ENOENT, the export left out", err)
	}
	if m, _ := e.mapping(u, sh.ID); m.Status != types.ShareError {
		t.Errorf("mapping %s, want error", m.Status)
	}
	if testenvMounted(dir) == nil {
		t.Error("mounted after the failed mount")
	}
	if g, _ := cx.MountGenerations(ctx); len(g) != 0 {
		t.Errorf("mount records after the failed mount: %v", g)
	}
	t.Logf("missing path: %v", err)
}
