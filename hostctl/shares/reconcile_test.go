package shares

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/ops"
)

// attached reports what the store says about share id on instance uuid:
// the mapping's status ("" when none), whether the share is locked for
// it, whether the instance's spec and its published metadata have it.
func (e *env) attached(uuid, name, id string) (status string, locked, inSpec, inMetadata bool) {
	e.t.Helper()
	if m, ok := e.mapping(uuid, id); ok {
		status = m.Status
	}
	for _, h := range e.share(id).Holders {
		locked = locked || h.Instance == uuid
	}
	rec, err := e.st.Instance(context.Background(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	inSpec = strings.Contains(string(rec.Spec), id)
	for _, d := range e.devices(uuid, "latest") {
		inMetadata = inMetadata || d.ShareID == id
	}
	return
}

func (e *env) wantAttached(where, uuid, name, id, status string) {
	e.t.Helper()
	st, locked, inSpec, inMD := e.attached(uuid, name, id)
	if st != status || !locked || !inSpec || !inMD {
		e.t.Errorf("%s: status %q locked %v in spec %v in metadata %v; want %s, locked, in spec and metadata", where, st, locked, inSpec, inMD, status)
	}
}

func (e *env) wantDetached(where, uuid, name, id string) {
	e.t.Helper()
	st, locked, inSpec, inMD := e.attached(uuid, name, id)
	if st != "" || locked || inSpec || inMD {
		e.t.Errorf("%s: status %q locked %v in spec %v in metadata %v; want no trace", where, st, locked, inSpec, inMD)
	}
}

// TestReconcileConverges: the states a crash (SIGKILL) between two steps
// leaves behind, and those of instances deleted while hostctl was down,
// each converge in one reconciler pass, and a second pass changes
// nothing. (test/e2e kills a real hostctl between the steps.)
func TestReconcileConverges(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(e *env, u, id string)
		check func(e *env, u, id string)
	}{
		{"attach: mapping created", func(e *env, u, id string) {
			e.crashAttach(u, id, 1)
		}, func(e *env, u, id string) { e.wantAttached("reconciled", u, "a", id, types.ShareInactive) }},
		{"attach: share locked", func(e *env, u, id string) {
			e.crashAttach(u, id, 2)
		}, func(e *env, u, id string) { e.wantAttached("reconciled", u, "a", id, types.ShareInactive) }},
		{"attach: domain redefined", func(e *env, u, id string) {
			e.crashAttach(u, id, 3)
		}, func(e *env, u, id string) { e.wantAttached("reconciled", u, "a", id, types.ShareInactive) }},
		{"attach: share deleted meanwhile", func(e *env, u, id string) {
			e.crashAttach(u, id, 1)
			if err := e.st.DeleteRecord(context.Background(), shareKey(id), -1); err != nil {
				e.t.Fatal(err)
			}
		}, func(e *env, u, id string) {
			if _, ok := e.mapping(u, id); ok {
				e.t.Error("mapping of a deleted share kept")
			}
		}},
		{"detach: detaching", func(e *env, u, id string) {
			e.attach("a", id)
			e.crashDetach(u, id, 1)
		}, func(e *env, u, id string) { e.wantDetached("reconciled", u, "a", id) }},
		{"detach: domain redefined", func(e *env, u, id string) {
			e.attach("a", id)
			e.crashDetach(u, id, 2)
		}, func(e *env, u, id string) { e.wantDetached("reconciled", u, "a", id) }},
		{"detach: share unlocked", func(e *env, u, id string) {
			e.attach("a", id)
			e.crashDetach(u, id, 3)
		}, func(e *env, u, id string) { e.wantDetached("reconciled", u, "a", id) }},
		{"lock without a mapping", func(e *env, u, id string) {
			if _, err := lock(context.Background(), e.st, id, Holder{Instance: u, Name: "a", Host: "host-a"}); err != nil {
				e.t.Fatal(err)
			}
		}, func(e *env, u, id string) { e.wantDetached("reconciled", u, "a", id) }},
		{"active, but the instance does not run", func(e *env, u, id string) {
			e.attach("a", id)
			m, _ := e.mapping(u, id)
			if err := transition(context.Background(), e.st, &m, types.ShareActive, "", types.ShareInactive); err != nil {
				e.t.Fatal(err)
			}
		}, func(e *env, u, id string) { e.wantAttached("reconciled", u, "a", id, types.ShareInactive) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, stores(t)["bolt"](t))
			u := e.instance("a", "demo")
			id := e.localShare("demo")
			tc.setup(e, u, id)
			if err := e.svc.Reconcile(context.Background()); err != nil {
				t.Fatal(err)
			}
			tc.check(e, u, id)
			before := e.snapshot()
			if err := e.svc.Reconcile(context.Background()); err != nil {
				t.Fatal(err)
			}
			if after := e.snapshot(); after != before {
				t.Errorf("a second pass changed something:\n%s\n---\n%s", before, after)
			}
		})
	}
}

// TestReconcileDeletedWhileDown: an instance deleted from the store while
// hostctl was down (another host's forced delete, a crash) leaves an
// active NFS mapping and a host mount: the start-up pass unmounts it,
// unlocks the share and removes the mapping; a mount under the NFS
// directory that no mapping explains is unmounted too.
func TestReconcileDeletedWhileDown(t *testing.T) {
	e := newEnv(t, stores(t)["redis"](t))
	ctx := context.Background()
	u := e.instance("a", "demo")
	id := e.nfsShare("demo", "filer:/x")
	e.attach("a", id)
	if err := e.svc.PrepareStart(ctx, u); err != nil {
		t.Fatal(err)
	}
	e.svc.StartDone(ctx, u, nil)
	// A leaked mount of another share.
	leak := "11111111-2222-4333-8444-555555555555"
	b, _ := os.ReadFile(e.run.mountinfo)
	b = append(b, fmt.Sprintf("98 1 0:98 / %s rw - nfs4 filer:/y rw\n", e.svc.mounts.Dir(leak))...)
	if err := os.WriteFile(e.run.mountinfo, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// hostctl "restarts": a new service on the same store; the instance
	// was removed from the store meanwhile.
	if err := e.st.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	svc := New(e.st, e.ctl, Options{Host: "host-a", ShareRoot: e.root, Runner: e.run, Logger: e.svc.log, MountInfo: e.run.mountinfo, ReconcileInterval: -1})
	if err := svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.mapping(u, id); ok {
		t.Error("mapping of the deleted instance kept")
	}
	if len(e.share(id).Holders) != 0 {
		t.Error("share still locked by the deleted instance")
	}
	if ids, _ := svc.mounts.mountedShares(); len(ids) != 0 {
		t.Errorf("host mounts kept: %v", ids)
	}
	calls := strings.Join(e.run.Calls(), "\n")
	for _, want := range []string{"umount " + svc.mounts.Dir(id), "umount " + svc.mounts.Dir(leak)} {
		if !strings.Contains(calls, want) {
			t.Errorf("no %q in\n%s", want, calls)
		}
	}
}

// TestReconcileRebuildsRefcounts: after a restart the reference counts
// come back from the active mappings, so a running instance's mount is
// kept and the stop of the last user unmounts.
func TestReconcileRebuildsRefcounts(t *testing.T) {
	e := newEnv(t, stores(t)["bolt"](t))
	ctx := context.Background()
	u := e.instance("a", "demo")
	id := e.nfsShare("demo", "filer:/x")
	e.attach("a", id)
	if err := e.svc.PrepareStart(ctx, u); err != nil {
		t.Fatal(err)
	}
	e.svc.StartDone(ctx, u, nil)
	// A restart; the instance still runs (its domain said so).
	e.inst = stateOverride{Instances: e.ctl, state: "running"}
	svc := New(e.st, instancesFunc{e}, Options{Host: "host-a", ShareRoot: e.root, Runner: e.run, Logger: e.svc.log, MountInfo: e.run.mountinfo, ReconcileInterval: -1})
	if err := svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if users := svc.mounts.Users(id); len(users) != 1 || users[0] != u {
		t.Errorf("rebuilt users %v, want [%s]", users, u)
	}
	if n := len(e.run.Calls()); n != 1 {
		t.Errorf("calls %q: the running instance's mount must be kept", e.run.Calls())
	}
	svc.Stopped(ctx, u)
	if calls := e.run.Calls(); calls[len(calls)-1] != "umount "+svc.mounts.Dir(id) {
		t.Errorf("calls %q, want the unmount", calls)
	}
}

func (e *env) attach(name, id string) {
	e.t.Helper()
	if _, err := e.svc.AttachShare(context.Background(), admin, name, types.ServerShareAttach{ShareID: id}); err != nil {
		e.t.Fatal(err)
	}
}

// crashAttach leaves what an attach killed after its first steps leaves:
// 1 the mapping (attaching), 2 and the lock, 3 and the redefined domain.
func (e *env) crashAttach(u, id string, steps int) {
	e.t.Helper()
	ctx := context.Background()
	m := Mapping{Instance: u, InstanceName: "a", Host: "host-a", Project: "demo", ShareID: id, Tag: id, Status: types.ShareAttaching,
		Proto: types.ShareProtoLocal, Export: e.share(id).Export}
	if err := createMapping(ctx, e.st, &m); err != nil {
		e.t.Fatal(err)
	}
	if steps >= 2 {
		if _, err := lock(ctx, e.st, id, Holder{Instance: u, Name: "a", Host: "host-a"}); err != nil {
			e.t.Fatal(err)
		}
	}
	if steps >= 3 {
		if err := e.svc.reapply(ctx, "a"); err != nil {
			e.t.Fatal(err)
		}
	}
}

// crashDetach leaves what a detach killed after its first steps leaves:
// 1 the mapping detaching, 2 and the domain redefined without the share,
// 3 and the share unlocked.
func (e *env) crashDetach(u, id string, steps int) {
	e.t.Helper()
	ctx := context.Background()
	m, _ := e.mapping(u, id)
	if err := transition(ctx, e.st, &m, types.ShareDetaching, "", types.ShareInactive); err != nil {
		e.t.Fatal(err)
	}
	if steps >= 2 {
		if err := e.svc.reapply(ctx, "a"); err != nil {
			e.t.Fatal(err)
		}
	}
	if steps >= 3 {
		if _, err := unlock(ctx, e.st, id, u); err != nil {
			e.t.Fatal(err)
		}
	}
}

// deadHosts says every host but this one is down.
type deadHosts struct{}

func (deadHosts) HostDown(context.Context, string) (bool, string, error) { return true, "stopped", nil }
func (deadHosts) List(context.Context) ([]types.HostStatus, error)       { return nil, nil }

// TestForceDeleteFromStoreDetaches: another host's instance forgotten by
// force (its host is dead) gives its shares back: the mappings go and the
// shares are unlocked, so they can be deleted.
func TestForceDeleteFromStoreDetaches(t *testing.T) {
	st := stores(t)["redis"](t)
	a := newEnv(t, st)
	ctx := context.Background()
	u := a.instance("a", "demo")
	id := a.localShare("demo")
	a.attach("a", id)
	b := newEnvWith(t, st, func(_ string, o *controller.Options) { o.Host, o.Hosts = "host-b", deadHosts{} })
	b.svc.host = "host-b"
	left, err := ops.New(b.ctl).ForceDeleteFromStore(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(left, "\n"), "NFS share mounts of a on host host-a") {
		t.Errorf("left %q", left)
	}
	if _, ok := a.mapping(u, id); ok {
		t.Error("mapping of the forgotten instance kept")
	}
	if err := b.svc.DeleteShare(ctx, admin, id); err != nil {
		t.Errorf("delete of the released share: %v", err)
	}
}

// TestAdoptedMappingsFollow: after another host adopts an instance, that
// host's reconciler moves the instance's mappings to it, so that it
// cleans them up if the instance is deleted there.
func TestAdoptedMappingsFollow(t *testing.T) {
	st := stores(t)["redis"](t)
	a := newEnv(t, st)
	ctx := context.Background()
	u := a.instance("a", "demo")
	id := a.localShare("demo")
	a.attach("a", id)
	b := newEnvWith(t, st, func(_ string, o *controller.Options) { o.Host, o.Hosts = "host-b", deadHosts{} })
	b.svc.host = "host-b"
	b.svc.root = a.svc.root
	if _, err := ops.New(b.ctl).Adopt(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := b.svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if m, _ := a.mapping(u, id); m.Host != "host-b" || m.Status != types.ShareInactive {
		t.Errorf("mapping after the adopt: host %q status %q, want host-b, inactive", m.Host, m.Status)
	}
	if _, err := b.svc.DetachShare(ctx, admin, "a", id, false); err != nil {
		t.Errorf("detach on the adopting host: %v", err)
	}
}
