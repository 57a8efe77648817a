package shares

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/ops"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
)

// TestSharesPartAnswers is the shares part's row of the parts ×
// operations table (issue 22 item 3): what it does for every operation,
// and a refusal only for an instance that has a share.
func TestSharesPartAnswers(t *testing.T) {
	var svc *Service
	ans := svc.Answers()
	if m := ans.Missing(); len(m) != 0 {
		t.Fatalf("no valid answer for %v", m)
	}
	want := map[part.Op]part.Action{
		part.Apply: part.Act, part.Start: part.Act, part.Stop: part.Act,
		part.RebootSoft: part.Nothing, part.RebootHard: part.Act,
		part.Delete: part.Act, part.ForceDelete: part.Act, part.Adopt: part.Act,
		part.Shelve: part.Act, part.Unshelve: part.Act,
		part.Rescue: part.Act, part.Unrescue: part.Act,
		part.Resize: part.Refuse, part.Rebuild: part.Refuse,
		part.Snapshot:    part.Nothing,
		part.MigrateCold: part.Refuse, part.ConfirmMigration: part.Nothing, part.RevertMigration: part.Nothing,
		part.MigrateLive: part.Refuse,
		part.Evacuate:    part.Act,
	}
	for _, op := range part.Ops() {
		if got := ans[op]; got.Do != want[op] || strings.TrimSpace(got.Why) == "" {
			t.Errorf("%s: %s (%q), want %s with a reason", op, got.Do, got.Why, want[op])
		}
	}

	e := newEnv(t, stores(t)["bolt"](t))
	ctx := context.Background()
	u := e.instance("a", "demo")
	in := &part.Instance{Spec: &model.Instance{Name: "a", UUID: u}}
	for _, op := range part.Ops() {
		if err := e.svc.Check(ctx, op, in); err != nil {
			t.Errorf("%s of an instance without shares: %v", op, err)
		}
	}
	id := e.localShare("demo")
	e.attach("a", id)
	for _, op := range part.Ops() {
		err := e.svc.Check(ctx, op, in)
		var re *part.RefusedError
		switch {
		case want[op] != part.Refuse && err != nil:
			t.Errorf("%s of an instance with a share: %v", op, err)
		case want[op] == part.Refuse && (!errors.As(err, &re) || re.Part != "shares" || re.Op != op || !strings.Contains(err.Error(), id)):
			t.Errorf("%s of an instance with a share: %v; want refused by shares naming %s", op, err, id)
		}
	}
	// The core's own names of the states the part compares with.
	if StateError != controller.StateError || StateMissing != controller.StateMissing || StateUnknown != controller.StateUnknown {
		t.Errorf("state names differ from the core's: %q %q %q", StateError, StateMissing, StateUnknown)
	}
}

// TestAdoptMovesMappingsAtOnce: the adopt of an instance whose host is
// down moves its share mappings to the adopting host in the same call
// (the part's Committed), inactive, without waiting for a reconcile pass;
// the adopting host can then detach them.
func TestAdoptMovesMappingsAtOnce(t *testing.T) {
	st := stores(t)["bolt"](t)
	a := newEnv(t, st)
	ctx := context.Background()
	u := a.instance("a", "demo")
	id := a.localShare("demo")
	a.attach("a", id)
	if err := a.svc.PrepareStart(ctx, u); err != nil {
		t.Fatal(err)
	}
	a.svc.StartDone(ctx, u, nil) // running on host-a when host-a dies
	if m, _ := a.mapping(u, id); m.Status != types.ShareActive {
		t.Fatalf("mapping before the adopt: %s, want active", m.Status)
	}
	b := newEnvWith(t, st, func(_ string, o *controller.Options) { o.Host, o.Hosts = "host-b", deadHosts{} })
	b.svc.host = "host-b"
	b.svc.root = a.svc.root
	if _, err := ops.New(b.ctl).Adopt(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if m, _ := a.mapping(u, id); m.Host != "host-b" || m.Status != types.ShareInactive {
		t.Errorf("mapping right after the adopt: host %q status %q, want host-b, inactive", m.Host, m.Status)
	}
	if _, err := b.svc.DetachShare(ctx, admin, "a", id, false); err != nil {
		t.Errorf("detach on the adopting host: %v", err)
	}
}

// TestStopBeforeFirstReconcileKeepsSharedMount: after a restart the host
// mounts' reference counts are empty until the reconciler's first pass;
// the core may tell the part of a stop before that (its own reconciler
// runs first). The part loads the counts from the active mappings
// first, so the NFS mount another instance on the host still uses stays.
func TestStopBeforeFirstReconcileKeepsSharedMount(t *testing.T) {
	e := newEnv(t, stores(t)["bolt"](t))
	ctx := context.Background()
	ua, ub := e.instance("a", "demo"), e.instance("b", "demo")
	id := e.nfsShare("demo", "filer:/export")
	e.attach("a", id)
	e.attach("b", id)
	for _, u := range []string{ua, ub} {
		if err := e.svc.PrepareStart(ctx, u); err != nil {
			t.Fatal(err)
		}
		e.svc.StartDone(ctx, u, nil)
	}
	// The daemon restarts: a new service, its counts empty.
	svc := New(e.st, instancesFunc{e}, Options{Host: "host-a", ShareRoot: e.root, Runner: e.run, MountInfo: e.run.mountinfo, ReconcileInterval: -1})
	t.Cleanup(func() { svc.Close() })
	if err := svc.AfterStop(ctx, &part.Instance{Spec: &model.Instance{Name: "a", UUID: ua}}); err != nil {
		t.Fatal(err)
	}
	if ids, _ := svc.mounts.mountedShares(); len(ids) != 1 {
		t.Errorf("mounted after a's stop: %v; want the share still mounted for b", ids)
	}
	if m, _ := e.mapping(ua, id); m.Status != types.ShareInactive {
		t.Errorf("a's mapping after its stop: %s, want inactive", m.Status)
	}
	if err := svc.AfterStop(ctx, &part.Instance{Spec: &model.Instance{Name: "b", UUID: ub}}); err != nil {
		t.Fatal(err)
	}
	if ids, _ := svc.mounts.mountedShares(); len(ids) != 0 {
		t.Errorf("mounted after every user stopped: %v", ids)
	}
}

// TestApplyRefusedWithoutShareSupport: an apply of a spec with shares is
// refused (ErrState, naming what libvirt lacks) on a host that cannot
// share guest memory, before anything changes: the part's Check, which
// the core asked itself before (CheckShareSupport).
func TestApplyRefusedWithoutShareSupport(t *testing.T) {
	e := newEnv(t, stores(t)["bolt"](t))
	ctx := context.Background()
	e.instance("a", "demo")
	id := e.localShare("demo")
	e.attach("a", id)
	e.svc.support = func(context.Context) (virt.ShareSupport, error) {
		return virt.ShareSupport{Virtiofs: true}, nil
	}
	before := e.snapshot()
	_, err := e.ctl.Apply(ctx, []byte("name: a\nproject_id: demo\nshares: [{share_id: "+id+"}]\n"))
	if !errors.Is(err, controller.ErrState) || !strings.Contains(err.Error(), "cannot share guest memory") {
		t.Fatalf("apply with a share on a host without shared memory: %v; want ErrState naming it", err)
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused apply changed something:\n%s\n---\n%s", before, after)
	}
	if _, err := e.ctl.Apply(ctx, []byte("name: b\nproject_id: demo\n")); err != nil {
		t.Errorf("an apply without shares on that host: %v", err)
	}
}
