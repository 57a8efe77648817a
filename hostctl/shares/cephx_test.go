package shares

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store"
)

// fakeCeph is Ceph's auth database in memory (CephAuth), with failures
// injected per operation.
type fakeCeph struct {
	mu      sync.Mutex
	adminKy string
	clients map[string]fakeClient
	fail    func(op, client string) error
	n       int
}

type fakeClient struct {
	key  string
	caps CephCaps
}

func newFakeCeph() *fakeCeph {
	return &fakeCeph{adminKy: "QURNSU5LRVk=", clients: map[string]fakeClient{}}
}

func (f *fakeCeph) check(a CephAdmin, op, client string) error {
	if string(a.Key) != f.adminKy {
		return errors.New("EACCES: authentication failed")
	}
	if f.fail != nil {
		return f.fail(op, client)
	}
	return nil
}

func (f *fakeCeph) Ensure(_ context.Context, a CephAdmin, client string, caps CephCaps) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(a, "ensure", client); err != nil {
		return nil, err
	}
	c, ok := f.clients[client]
	if !ok {
		f.n++
		c.key = fmt.Sprintf("S0VZLSVk%04d", f.n)
	}
	c.caps = caps
	f.clients[client] = c
	return []byte(c.key), nil
}

func (f *fakeCeph) SetCaps(_ context.Context, a CephAdmin, client string, caps CephCaps) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(a, "caps", client); err != nil {
		return err
	}
	c, ok := f.clients[client]
	if !ok {
		return fmt.Errorf("ENOENT: %s", client)
	}
	c.caps = caps
	f.clients[client] = c
	return nil
}

func (f *fakeCeph) Remove(_ context.Context, a CephAdmin, client string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(a, "remove", client); err != nil {
		return err
	}
	delete(f.clients, client)
	return nil
}

func (f *fakeCeph) Clients(_ context.Context, a CephAdmin, prefix string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(a, "list", ""); err != nil {
		return nil, err
	}
	var out []string
	for n := range f.clients {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

func (f *fakeCeph) Version(_ context.Context, a CephAdmin) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(a, "version", ""); err != nil {
		return "", err
	}
	return "16.2.15", nil
}

func (f *fakeCeph) FileSystems(_ context.Context, a CephAdmin) ([]string, error) {
	return []string{"cephfs"}, f.check(a, "fs", "")
}

func (f *fakeCeph) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.clients {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// fuseRunner plays ceph-fuse: it checks that the key is in a 0600
// keyring file and on no argument.
type fuseRunner struct {
	t    *testing.T
	keys *fakeCeph
}

func (r fuseRunner) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	if name != "ceph-fuse" {
		return nil, fmt.Errorf("unexpected %s", name)
	}
	i := slices.Index(args, "-k")
	if i < 0 {
		r.t.Errorf("ceph-fuse %q: no -k keyring", args)
		return nil, errors.New("no keyring")
	}
	fi, err := os.Stat(args[i+1])
	if err != nil || fi.Mode().Perm() != 0o600 {
		r.t.Errorf("keyring file %s: %v, mode %v; want 0600", args[i+1], err, fi)
	}
	for _, c := range r.keys.clients {
		for _, a := range args {
			if strings.Contains(a, c.key) {
				r.t.Errorf("a key on ceph-fuse's command line: %q", args)
			}
		}
	}
	return nil, nil
}

const testHost = "h1"

type cephxEnv struct {
	t    *testing.T
	st   store.Store
	km   *keys.Manager
	ceph *fakeCeph
	run  string
}

func newCephxEnv(t *testing.T) *cephxEnv {
	st := stores(t)["bolt"](t)
	km, err := keys.Open(context.Background(), st, t.TempDir(), keys.Options{Host: testHost})
	if err != nil {
		t.Fatal(err)
	}
	return &cephxEnv{t: t, st: st, km: km, ceph: newFakeCeph(), run: filepath.Join(t.TempDir(), "run")}
}

// cephx is a fresh CephX on the env's store: a restarted hostctl.
func (e *cephxEnv) cephx() *CephX {
	return NewCephX(CephXOptions{Host: testHost, Store: e.st, Keys: e.km, Auth: e.ceph, RunDir: e.run,
		Runner: fuseRunner{t: e.t, keys: e.ceph}, Logger: discard()})
}

func (e *cephxEnv) configure(cx *CephX) {
	e.t.Helper()
	if _, err := cx.ConfigureAdmin(context.Background(), []byte("[client.admin]\n\tkey = "+e.ceph.adminKy+"\n"), "127.0.0.1:3300"); err != nil {
		e.t.Fatal(err)
	}
}

// secrets are the key manager's CephX secrets' names.
func (e *cephxEnv) secrets() []string {
	e.t.Helper()
	all, err := e.km.List(context.Background(), CephKeysProject)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, s := range all {
		out = append(out, s.Name)
	}
	sort.Strings(out)
	return out
}

// consistent checks that Ceph, the record and the key manager agree:
// every generation Ceph has is recorded (none orphaned and unlisted),
// every recorded one exists in Ceph and has its key.
func (e *cephxEnv) consistent(want ...int64) {
	e.t.Helper()
	st, err := e.cephx().load(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	var rec, inCeph, secs []string
	for _, g := range st.Generations {
		rec = append(rec, ClientName(testHost, g.Gen))
	}
	for _, n := range e.ceph.names() {
		if strings.HasPrefix(n, "client.vmeta-"+testHost+".") {
			inCeph = append(inCeph, n)
		}
	}
	for _, s := range e.secrets() {
		if strings.HasPrefix(s, "client.") {
			secs = append(secs, s)
		}
	}
	var wantNames []string
	for _, g := range want {
		wantNames = append(wantNames, ClientName(testHost, g))
	}
	if !slices.Equal(rec, wantNames) || !slices.Equal(inCeph, wantNames) || !slices.Equal(secs, wantNames) {
		e.t.Fatalf("generations: recorded %v, in Ceph %v, keys %v; want %v everywhere", rec, inCeph, secs, wantNames)
	}
}

var errCrash = errors.New("crash (injected)")

// TestCephXRotationCrashMatrix kills the rotation (and the prune) at
// every step, restarts (a fresh CephX and engine on the same store) and
// runs it again: no client is lost, none is left unlisted, no key is
// orphaned in the key manager, a mount keeps its generation (not pruned
// while used), the status reaches the wanted generation with the Ceph
// version.
func TestCephXRotationCrashMatrix(t *testing.T) {
	steps := []string{"", "created", "stored", "recorded", "prune-remove", "prune-removed", "ceph:ensure", "ceph:remove"}
	for _, step := range steps {
		t.Run("crash="+orDash(step), func(t *testing.T) {
			ctx := context.Background()
			e := newCephxEnv(t)
			cx := e.cephx()
			e.configure(cx)
			e.consistent(1)
			exp := CephFSExport{Mons: []string{"127.0.0.1:3300"}, Path: "/vol/a"}
			if err := cx.Grant(ctx, "s1", exp); err != nil {
				t.Fatal(err)
			}
			// Share s1 mounted with generation 1 by instance i1; share
			// s2 mapped, not mounted.
			if err := cx.Mount(ctx, "s1", exp, t.TempDir()); err != nil {
				t.Fatal(err)
			}
			cx.users = func(string) []string { return []string{"i1"} }
			// Rotate to 2 then 3 with keep 0: generation 1 stays (used),
			// 2 goes at the rotation to 3 (unused).
			eng := func(cx *CephX) *keyrotation.Engine {
				en := keyrotation.New(e.st, keyrotation.Options{Host: testHost, Version: "1.0.0"})
				en.Register(keyrotation.CephX, keyrotation.CephXRotator{Client: cx})
				return en
			}
			zero := 0
			set := func(en *keyrotation.Engine, gen int64) {
				if _, err := en.SetPolicy(ctx, keyrotation.Subject{Class: keyrotation.CephX}, keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: gen, KeepPriorKeyCount: &zero}); err != nil {
					t.Fatal(err)
				}
			}
			en := eng(cx)
			set(en, 2)
			if err := en.Run(ctx); err != nil {
				t.Fatal(err)
			}
			e.consistent(1, 2)
			set(en, 3)

			crashed := false
			cephxStep = func(s string) error {
				if s == step && !crashed {
					crashed = true
					return errCrash
				}
				return nil
			}
			t.Cleanup(func() { cephxStep = func(string) error { return nil } })
			if op, ok := strings.CutPrefix(step, "ceph:"); ok {
				e.ceph.fail = func(o, _ string) error {
					if o == op && !crashed {
						crashed = true
						return errors.New("ceph: connection refused")
					}
					return nil
				}
			}
			err := en.Run(ctx)
			if step != "" && (err == nil || !crashed) {
				t.Fatalf("run with a crash at %s: %v (crashed %v)", step, err, crashed)
			}
			// Restart: a fresh CephX and engine.
			cx2 := e.cephx()
			cx2.users = cx.users
			en2 := eng(cx2)
			if err := en2.Run(ctx); err != nil {
				t.Fatalf("run after restart: %v", err)
			}
			e.consistent(1, 3)
			rep, err := en2.Reports(ctx, keyrotation.CephX)
			if err != nil || len(rep) != 1 {
				t.Fatalf("reports %v, %v", rep, err)
			}
			r := rep[0]
			if r.Status.KeyGeneration != 3 || r.Status.KeyCephVersion != "16.2.15" || !r.Complete || r.Status.PriorKeyCount == nil || *r.Status.PriorKeyCount != 1 {
				t.Errorf("status %+v complete %v: want generation 3, keyCephVersion 16.2.15, one prior key", r.Status, r.Complete)
			}
			if len(r.Holders) != 1 || r.Holders[0].InstanceUUID != "i1" || r.Holders[0].Generation != 1 {
				t.Errorf("holders %+v: want i1 on generation 1", r.Holders)
			}
			// New mounts use generation 3; caps of every generation alike.
			if err := cx2.Mount(ctx, "s2", exp, t.TempDir()); err != nil {
				t.Fatal(err)
			}
			if g, _ := cx2.MountGenerations(ctx); g["s1"] != 1 || g["s2"] != 3 {
				t.Errorf("mount generations %v: want s1 on 1, s2 on 3", g)
			}
			for _, n := range []int64{1, 3} {
				if c := e.ceph.clients[ClientName(testHost, n)].caps; c.MDS != "allow rw path=/vol/a" {
					t.Errorf("caps of generation %d: %+v", n, c)
				}
			}
			// The instance stops: its mount goes, then the prune deletes
			// generation 1.
			cx2.Unmounted(ctx, "s1")
			if _, err := en2.Prune(ctx, keyrotation.CephX, 0); err != nil {
				t.Fatal(err)
			}
			e.consistent(3)
		})
	}
}

// TestCephXBadInput: bad admin keyrings change nothing; policies
// WithVersionUpgrade are refused with the specification's reason.
func TestCephXBadInput(t *testing.T) {
	ctx := context.Background()
	e := newCephxEnv(t)
	cx := e.cephx()
	for _, tc := range []struct{ keyring, mons, want string }{
		{"[client.admin]\n\tkey = V1JPTkc=\n", "127.0.0.1:3300", "does not authenticate"},
		{"[mon.]\n\tkey = " + e.ceph.adminKy + "\n", "127.0.0.1:3300", "no client entity"},
		{"[client.admin]\n\tkey = " + e.ceph.adminKy + "\n", "", "mons"},
	} {
		_, err := cx.ConfigureAdmin(ctx, []byte(tc.keyring), tc.mons)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "V1JPTkc") || strings.Contains(err.Error(), e.ceph.adminKy) {
			t.Errorf("ConfigureAdmin(%q, %q): %v; want %q, no key", tc.keyring, tc.mons, err, tc.want)
		}
	}
	if cx.Configured(ctx) || len(e.secrets()) != 0 || len(e.ceph.names()) != 0 {
		t.Errorf("bad input changed something: configured %v, secrets %v, clients %v", cx.Configured(ctx), e.secrets(), e.ceph.names())
	}
	// Mount and grant without an admin keyring: a clear error.
	if err := cx.Grant(ctx, "s", CephFSExport{Path: "/a"}); !errors.Is(err, ErrCephXNotConfigured) {
		t.Errorf("grant unconfigured: %v", err)
	}
	err := keyrotation.Policy{KeyRotationPolicy: keyrotation.WithVersionUpgrade}.Check(keyrotation.CephX)
	if err == nil || !strings.Contains(err.Error(), "existing mounts' connectivity") {
		t.Errorf("WithVersionUpgrade for cephx: %v", err)
	}
	// Capabilities Ceph refuses: the grant's error says so and the caps
	// stay; the record keeps the grant for Sync to retry.
	e.configure(cx)
	e.ceph.fail = func(op, _ string) error {
		if op == "caps" {
			return errors.New("EINVAL: bad caps")
		}
		return nil
	}
	if err := cx.Grant(ctx, "s", CephFSExport{Path: "/a"}); err == nil || !strings.Contains(err.Error(), "EINVAL") {
		t.Errorf("grant with caps refused: %v", err)
	}
	e.ceph.fail = nil
	if err := cx.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if c := e.ceph.clients[ClientName(testHost, 1)].caps; c.MDS != "allow rw path=/a" {
		t.Errorf("caps after Sync: %+v", c)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestCephXStatusAdoptsCreatedClient: the engine recorded the cephx
// status before the operator gave the admin keyring (no client: 0); the
// client made then (generation 1) is adopted, so the next `keys rotate
// cephx` makes generation 2, not a no-op "1".
func TestCephXStatusAdoptsCreatedClient(t *testing.T) {
	ctx := context.Background()
	e := newCephxEnv(t)
	cx := e.cephx()
	en := keyrotation.New(e.st, keyrotation.Options{Host: testHost, Version: "1.0.0"})
	en.Register(keyrotation.CephX, keyrotation.CephXRotator{Client: cx})
	if err := en.Run(ctx); err != nil {
		t.Fatal(err)
	}
	e.configure(cx)
	rot, err := en.Rotate(ctx, keyrotation.Subject{Class: keyrotation.CephX})
	if err != nil || rot.KeyGeneration != 2 {
		t.Fatalf("rotate after ceph-auth: %+v, %v; want generation 2", rot, err)
	}
	if err := en.Run(ctx); err != nil {
		t.Fatal(err)
	}
	e.consistent(1, 2)
}

// TestCephXCapsSyncedAtStart: hostctl killed between a grant's record
// and its `ceph auth caps` (the caps call never made it): the restarted
// service's first reconcile sets the caps from the record.
func TestCephXCapsSyncedAtStart(t *testing.T) {
	ctx := context.Background()
	e := newCephxEnv(t)
	cx := e.cephx()
	e.configure(cx)
	e.ceph.fail = func(op, _ string) error {
		if op == "caps" {
			return errCrash
		}
		return nil
	}
	if err := cx.Grant(ctx, "s1", CephFSExport{Path: "/vol/x"}); !errors.Is(err, errCrash) {
		t.Fatalf("grant: %v", err)
	}
	e.ceph.fail = nil
	if c := e.ceph.clients[ClientName(testHost, 1)].caps; c.MDS != "" {
		t.Fatalf("caps before the restart: %+v", c)
	}
	// And killed after an unmount, before its record went: the record
	// would keep generation 1 from the prune.
	if err := cx.Mount(ctx, "s2", CephFSExport{Path: "/vol/y"}, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	env := newEnv(t, e.st)
	env.svc.cephx = e.cephx()
	env.svc.mounts.ceph = env.svc.cephx
	if err := env.svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if c := e.ceph.clients[ClientName(testHost, 1)].caps; !strings.Contains(c.MDS, "allow rw path=/vol/x") {
		t.Errorf("caps after the restarted reconcile: %+v", c)
	}
	if g, _ := env.svc.cephx.MountGenerations(ctx); len(g) != 0 {
		t.Errorf("mount records after the restarted reconcile: %v; want the unmounted share's gone", g)
	}
}

// kernelRunner plays mount -t ceph: the key is in the 0600 secretfile
// and in no argument.
type kernelRunner struct {
	t     *testing.T
	calls *[]string
	key   func() string
}

func (r kernelRunner) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	*r.calls = append(*r.calls, name+" "+strings.Join(args, " "))
	for _, a := range args {
		if strings.Contains(a, r.key()) {
			r.t.Errorf("the key on mount's command line: %q", args)
		}
		for _, o := range strings.Split(a, ",") {
			if sf, ok := strings.CutPrefix(o, "secretfile="); ok {
				b, err := os.ReadFile(sf)
				fi, _ := os.Stat(sf)
				if err != nil || strings.TrimSpace(string(b)) != r.key() || fi.Mode().Perm() != 0o600 {
					r.t.Errorf("secretfile %s: %q, %v, %v", sf, b, err, fi)
				}
			}
		}
	}
	return nil, nil
}

// TestCephXKernelMount: on a host whose kernel has a ceph client, the
// share is mounted with mount -t ceph as the newest generation, the key
// through a 0600 secret file removed after the mount.
func TestCephXKernelMount(t *testing.T) {
	ctx := context.Background()
	e := newCephxEnv(t)
	cx := e.cephx()
	e.configure(cx)
	var calls []string
	cx.kernel = func() bool { return true }
	cx.run = kernelRunner{t: t, calls: &calls, key: func() string { return e.ceph.clients[ClientName(testHost, 1)].key }}
	exp := CephFSExport{Mons: []string{"10.0.0.1:3300", "10.0.0.2"}, Path: "/vol/a", FS: "fs2"}
	if err := cx.Grant(ctx, "s1", exp); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := cx.Mount(ctx, "s1", exp, dir); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || !strings.HasPrefix(calls[0], "mount -t ceph 10.0.0.1:3300,10.0.0.2:/vol/a "+dir+" -o name=vmeta-h1.1,secretfile=") || !strings.HasSuffix(calls[0], ",fs=fs2") {
		t.Errorf("calls %q", calls)
	}
	if left, _ := filepath.Glob(filepath.Join(e.run, "*")); len(left) != 0 {
		t.Errorf("runtime directory after the mount: %v", left)
	}
}
