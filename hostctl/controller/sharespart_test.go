package controller_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/shares"
	"github.com/vmeta/vmeta/internal/store"
)

// fakeMounts plays mount(8) and umount(8) for the share service: each
// call is recorded and the mount table (a mountinfo file) follows.
type fakeMounts struct {
	mu        sync.Mutex
	calls     []string
	mountinfo string
}

func (f *fakeMounts) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name+" "+strings.Join(args, " "))
	b, err := os.ReadFile(f.mountinfo)
	if err != nil {
		return nil, err
	}
	dir := args[len(args)-1]
	switch name {
	case "mount":
		b = append(b, fmt.Sprintf("99 1 0:99 / %s rw,relatime - nfs4 %s rw\n", dir, args[len(args)-2])...)
	case "umount":
		var keep []string
		for _, l := range strings.SplitAfter(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
				continue
			}
			keep = append(keep, l)
		}
		b = []byte(strings.Join(keep, ""))
	}
	return nil, os.WriteFile(f.mountinfo, b, 0o600)
}

// count is how many calls of command name were made.
func (f *fakeMounts) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if strings.HasPrefix(c, name+" ") {
			n++
		}
	}
	return n
}

// mounted reports whether dir is in the mount table.
func (f *fakeMounts) mounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile(f.mountinfo)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(strings.Split(string(b), "\n"), func(l string) bool {
		f := strings.Fields(l)
		return len(f) > 4 && f[4] == dir
	})
}

// sharesEnv is the core over the fake hypervisor with the share service
// registered as its part (as the daemon does).
type sharesEnv struct {
	*controller.Env
	svc *shares.Service
	run *fakeMounts
}

var admin = types.Principal{Role: types.RoleAdmin, Name: "root"}

func newSharesEnv(t *testing.T) *sharesEnv {
	t.Helper()
	e := controller.NewEnv(t)
	root := filepath.Join(e.Dir(), "shares")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	run := &fakeMounts{mountinfo: filepath.Join(t.TempDir(), "mountinfo")}
	if err := os.WriteFile(run.mountinfo, []byte("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	svc := shares.New(e.Store(), e.Ctl(), shares.Options{ShareRoot: root, Runner: run, MountInfo: run.mountinfo, ReconcileInterval: -1})
	t.Cleanup(func() { svc.Close() })
	e.AddPart(svc)
	return &sharesEnv{Env: e, svc: svc, run: run}
}

// mapping is the status of instance's mapping of share id.
func (e *sharesEnv) mapping(t *testing.T, instance, id string) string {
	t.Helper()
	ms, err := e.svc.ServerShares(context.Background(), admin, instance)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.ShareID == id {
			return m.Status
		}
	}
	t.Fatalf("%s has no mapping of share %s: %+v", instance, id, ms)
	return ""
}

// Issue 22 item 3: shelve stops the instance's share mappings (inactive,
// host mounts released) and unshelve maps and mounts them again; resize
// and rebuild stay refused while a share is attached. The guest powered
// itself off before the shelve (nobody told the share service), so the
// NFS mount is still held when the shelve begins: the shelve releases it.
// On main before the shares part, the shelve was refused (409: shares are
// attached).
func TestShelveStopsShareMappings(t *testing.T) {
	t.Parallel()
	e := newSharesEnv(t)
	ctx := context.Background()
	sh, err := e.svc.CreateShare(ctx, admin, types.ShareCreateRequest{ProjectID: "demo", Proto: types.ShareProtoNFS, ExportLocation: "filer:/export/data"})
	if err != nil {
		t.Fatal(err)
	}
	id := sh.ID
	dir := e.svc.Mounts().Dir(id)
	e.MustApply("name: vm1\nproject_id: demo\ndisks: [{name: vda, size: 8M}]\nshares: [{share_id: " + id + ", tag: data}]\n")
	if st := e.mapping(t, "vm1", id); st != types.ShareInactive {
		t.Fatalf("mapping after the apply: %s, want inactive", st)
	}
	if _, err := e.Ctl().Start(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	if st := e.mapping(t, "vm1", id); st != types.ShareActive || !e.run.mounted(t, dir) {
		t.Fatalf("after start: mapping %s, mounted %v; want active and mounted", st, e.run.mounted(t, dir))
	}

	// Refused while a share is attached, naming the part and the share.
	for _, op := range []func() error{
		func() error { _, err := e.Ctl().Resize(ctx, "vm1", "f.big"); return err },
		func() error { _, err := e.Ctl().Rebuild(ctx, "vm1", "img"); return err },
	} {
		err := op()
		var re *part.RefusedError
		if !errors.Is(err, controller.ErrState) || !errors.As(err, &re) || re.Part != "shares" || !strings.Contains(err.Error(), id) {
			t.Errorf("a move with a share attached: %v; want refused by shares naming %s", err, id)
		}
	}

	e.GuestPowerOff("vm1")
	if !e.run.mounted(t, dir) || e.mapping(t, "vm1", id) != types.ShareActive {
		t.Fatal("the guest's power-off was told to the share service already; the test needs it not to be")
	}
	if _, err := e.Ctl().Shelve(ctx, "vm1"); err != nil {
		t.Fatalf("shelve of an instance with a share: %v", err)
	}
	if st := e.mapping(t, "vm1", id); st != types.ShareInactive {
		t.Errorf("mapping after the shelve: %s, want inactive", st)
	}
	if e.run.mounted(t, dir) || e.run.count("umount") != 1 || len(e.svc.Mounts().Users(id)) != 0 {
		t.Errorf("after the shelve: mounted %v, %d umounts, users %v; want the host mount released", e.run.mounted(t, dir), e.run.count("umount"), e.svc.Mounts().Users(id))
	}
	if x := e.DomainXML("vm1"); x != "" {
		t.Errorf("a shelved instance has a domain:\n%s", x)
	}

	if _, err := e.Ctl().Unshelve(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	if st := e.mapping(t, "vm1", id); st != types.ShareActive {
		t.Errorf("mapping after the unshelve: %s, want active", st)
	}
	if !e.run.mounted(t, dir) || e.run.count("mount") != 2 || !slices.Equal(e.svc.Mounts().Users(id), e.instanceUUIDs(t, "vm1")) {
		t.Errorf("after the unshelve: mounted %v, %d mounts, users %v; want mounted again for vm1", e.run.mounted(t, dir), e.run.count("mount"), e.svc.Mounts().Users(id))
	}
	if x := e.DomainXML("vm1"); !strings.Contains(x, "<filesystem") || !strings.Contains(x, "'data'") && !strings.Contains(x, `"data"`) || !strings.Contains(x, dir) {
		t.Errorf("the unshelved domain lacks the share's virtiofs filesystem (tag data, %s):\n%s", dir, x)
	}

	// And the stop after it releases the mount once more.
	if _, err := e.Ctl().Stop(ctx, "vm1", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if st := e.mapping(t, "vm1", id); st != types.ShareInactive || e.run.mounted(t, dir) {
		t.Errorf("after the stop: mapping %s, mounted %v; want inactive and released", st, e.run.mounted(t, dir))
	}
}

// instanceUUIDs are the UUIDs of the named instances.
func (e *sharesEnv) instanceUUIDs(t *testing.T, names ...string) []string {
	t.Helper()
	var out []string
	for _, n := range names {
		rec, err := e.Store().Instance(context.Background(), n)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec.UUID)
	}
	return out
}

// A rescue runs a domain without the instance's shares: the shares part
// stops its mappings (inactive, the NFS host mount released) when the
// rescue shuts the instance down, and unrescue's start mounts them again
// (active, the instance's domain has the share again). Before the shares
// part, the mappings stayed active and the mount held for a domain
// without the share until a reconcile pass noticed.
func TestRescueStopsShareMappings(t *testing.T) {
	t.Parallel()
	e := newSharesEnv(t)
	ctx := context.Background()
	sh, err := e.svc.CreateShare(ctx, admin, types.ShareCreateRequest{ProjectID: "demo", Proto: types.ShareProtoNFS, ExportLocation: "filer:/export/data"})
	if err != nil {
		t.Fatal(err)
	}
	id := sh.ID
	dir := e.svc.Mounts().Dir(id)
	e.MustApply("name: vm1\nproject_id: demo\ndisks: [{name: vda, size: 8M}]\nshares: [{share_id: " + id + ", tag: data}]\n")
	e.ImportBlankImage("rescue-img", "8M")
	if _, err := e.Ctl().Start(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	if st := e.mapping(t, "vm1", id); st != types.ShareActive || !e.run.mounted(t, dir) {
		t.Fatalf("after start: mapping %s, mounted %v; want active and mounted", st, e.run.mounted(t, dir))
	}
	if _, err := e.Ctl().Rescue(ctx, "vm1", controller.RescueRequest{Image: "rescue-img", TimeoutSeconds: 0.01}); err != nil {
		t.Fatal(err)
	}
	if st := e.mapping(t, "vm1", id); st != types.ShareInactive || e.run.mounted(t, dir) || e.run.count("umount") != 1 {
		t.Errorf("in rescue: mapping %s, mounted %v, %d umounts; want inactive and released", st, e.run.mounted(t, dir), e.run.count("umount"))
	}
	if x := e.DomainXML("vm1"); strings.Contains(x, "<filesystem") {
		t.Errorf("the rescue domain has a share:\n%s", x)
	}
	if _, err := e.Ctl().Unrescue(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	if st := e.mapping(t, "vm1", id); st != types.ShareActive || !e.run.mounted(t, dir) || e.run.count("mount") != 2 {
		t.Errorf("after unrescue: mapping %s, mounted %v, %d mounts; want active and mounted again", st, e.run.mounted(t, dir), e.run.count("mount"))
	}
	if x := e.DomainXML("vm1"); !strings.Contains(x, "<filesystem") || !strings.Contains(x, dir) {
		t.Errorf("the unrescued domain lacks the share:\n%s", x)
	}
}
