package shares

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/ops"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// TestSpecSharesAreMappings: a share the instance spec names (by the id of
// a registered share) is attached by the apply through the share model,
// as `hostctl share attach` does: a mapping (inactive), the share locked,
// listed by GET /v1/servers/{id}/shares, counted when a move is refused,
// published in the metadata, an event; applying the spec again (or the
// spec an instance show returns) changes nothing. Issue 20, item 16.
func TestSpecSharesAreMappings(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, open(t))
			ctx := context.Background()
			u := e.instance("a", "demo")
			id := e.localShare("demo")
			spec := "name: a\nproject_id: demo\nshares: [{share_id: " + id + ", tag: data}]\n"
			if _, err := e.ctl.Apply(ctx, []byte(spec)); err != nil {
				t.Fatal(err)
			}
			m, ok := e.mapping(u, id)
			if !ok || m.Status != types.ShareInactive || m.Tag != "data" || m.InstanceName != "a" || m.Host != "host-a" {
				t.Fatalf("mapping %+v %v, want inactive with tag data", m, ok)
			}
			if sh := e.share(id); len(sh.Holders) != 1 || sh.Holders[0].Instance != u {
				t.Errorf("share not locked by the instance: %+v", sh.Holders)
			}
			ms, err := e.svc.ServerShares(ctx, admin, "a")
			if err != nil || len(ms) != 1 || ms[0].ShareID != id || ms[0].Status != types.ShareInactive {
				t.Errorf("GET /v1/servers/a/shares: %+v %v", ms, err)
			}
			if _, err := ops.New(e.ctl).Resize(ctx, "a", "f.big"); !errors.Is(err, controller.ErrState) || !strings.Contains(err.Error(), id) {
				t.Errorf("a move with a spec share: %v; want refused naming the share", err)
			}
			if devs := e.devices(u, "latest"); len(devs) != 1 || devs[0].ShareID != id || devs[0].Tag != "data" {
				t.Errorf("metadata devices %+v", devs)
			}
			if evs := e.shareEvents(); len(evs) != 1 || evs[0].Type != EventAttached {
				t.Errorf("events %+v", evs)
			}
			if err := e.svc.DeleteShare(ctx, admin, id); err == nil || !strings.Contains(err.Error(), "locked") {
				t.Errorf("delete of a share a spec attached: %v", err)
			}
			// The same spec again, and the stored spec (with the source
			// hostctl recorded) again: nothing to attach.
			before := e.snapshot()
			if _, err := e.ctl.Apply(ctx, []byte(spec)); err != nil {
				t.Fatal(err)
			}
			shown, err := e.ctl.Get(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			if len(shown.Spec.Shares) != 1 || shown.Spec.Shares[0].Source == "" {
				t.Fatalf("stored spec shares %+v", shown.Spec.Shares)
			}
			if _, err := e.ctl.ApplyInstance(ctx, shown.Spec); err != nil {
				t.Fatal(err)
			}
			if m2, _ := e.mapping(u, id); m2.Status != types.ShareInactive || m2.Updated != m.Updated {
				t.Errorf("mapping changed by applying again: %+v", m2)
			}
			if got := e.snapshot(); strings.Count(got, "share-mapping/") != strings.Count(before, "share-mapping/") {
				t.Errorf("applying again changed the mappings:\n%s\n%s", before, got)
			}
			// Detached, it is gone from the spec; the spec file applied
			// again attaches it again.
			if _, err := e.svc.DetachShare(ctx, admin, "a", id, false); err != nil {
				t.Fatal(err)
			}
			if _, ok := e.mapping(u, id); ok {
				t.Fatal("mapping left after the detach")
			}
			if _, err := e.ctl.Apply(ctx, []byte(spec)); err != nil {
				t.Fatal(err)
			}
			if m, ok := e.mapping(u, id); !ok || m.Status != types.ShareInactive {
				t.Errorf("re-attached by the spec: %+v %v", m, ok)
			}
		})
	}
}

// TestSpecSharesRefused: what a spec cannot do with shares is refused
// with the field, the value and the rule, and nothing changes: an
// unknown share, a source written in the spec (with '..', outside the
// share root, or even inside it), another project's share, an instance
// that is not SHUTOFF, a new instance without a hypervisor, a tag
// another attached share has. Issue 20, item 16; issue 21, item 10.
func TestSpecSharesRefused(t *testing.T) {
	e := newEnv(t, stores(t)["bolt"](t))
	ctx := context.Background()
	e.instance("a", "demo")
	e.instance("b", "demo")
	id := e.localShare("demo")
	other := e.localShare("other")
	taken := e.localShare("demo")
	if _, err := e.svc.AttachShare(ctx, admin, "b", types.ServerShareAttach{ShareID: taken, Tag: "taken"}); err != nil {
		t.Fatal(err)
	}
	inRoot := filepath.Join(e.root, "plain")
	if err := os.MkdirAll(inRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	const unknown = "7f3c9a52-1b0e-4a8e-8f7e-5d3c2b1a0f99"
	for _, tc := range []struct {
		name, spec string
		state      string // the instance's state the service sees
		is         error
		says       []string
	}{
		{name: "unknown share", spec: "name: a\nproject_id: demo\nshares: [{share_id: " + unknown + ", tag: webdata}]\n",
			is: model.ErrInvalidSpec, says: []string{"shares[0].share_id", unknown, "is not a share of the share registry", "hostctl share create --id " + unknown}},
		{name: "source outside the root", spec: "name: a\nproject_id: demo\nshares: [{share_id: " + unknown + ", tag: webdata, source: /srv/webdata}]\n",
			is: model.ErrInvalidSpec, says: []string{"shares[0].source", "/srv/webdata"}},
		{name: "source of a registered share outside the root", spec: "name: a\nproject_id: demo\nshares: [{share_id: " + id + ", tag: webdata, source: /srv/webdata}]\n",
			is: model.ErrInvalidSpec, says: []string{"shares[0].source", "is outside the share root", "leave source out"}},
		{name: "source with ..", spec: "name: a\nproject_id: demo\nshares: [{share_id: " + id + ", tag: webdata, source: " + e.root + "/../../etc}]\n",
			is: model.ErrInvalidSpec, says: []string{"shares[0].source", "must not contain '..'"}},
		{name: "relative source", spec: "name: a\nproject_id: demo\nshares: [{share_id: " + id + ", tag: webdata, source: etc}]\n",
			is: model.ErrInvalidSpec, says: []string{"shares[0].source", "must be an absolute host directory"}},
		{name: "source inside the root", spec: "name: a\nproject_id: demo\nshares: [{share_id: " + id + ", tag: webdata, source: " + inRoot + "}]\n",
			is: model.ErrInvalidSpec, says: []string{"shares[0].source", "a spec does not give a share's directory", "hostctl share create"}},
		{name: "another project's share", spec: "name: a\nproject_id: demo\nshares: [{share_id: " + other + "}]\n",
			is: ErrForbidden, says: []string{other, "belongs to project other"}},
		{name: "tag of an attached share", spec: "name: b\nproject_id: demo\nshares: [{share_id: " + id + ", tag: taken}]\n",
			says: []string{`share.tag "taken"`, taken}},
		{name: "another tag for an attached share", spec: "name: b\nproject_id: demo\nshares: [{share_id: " + taken + ", tag: other}]\n",
			is: model.ErrInvalidSpec, says: []string{"shares[0].tag", `is attached with tag "taken"`}},
		{name: "another source for an attached share", spec: "name: b\nproject_id: demo\nshares: [{share_id: " + taken + ", tag: taken, source: " + inRoot + "}]\n",
			is: model.ErrInvalidSpec, says: []string{"shares[0].source", "is not the directory of share " + taken}},
		{name: "running instance", spec: "name: a\nproject_id: demo\nshares: [{share_id: " + id + "}]\n", state: "running",
			is: controller.ErrState, says: []string{"the instance is running; shares are attached to SHUTOFF instances"}},
		{name: "instance in ERROR", spec: "name: a\nproject_id: demo\nshares: [{share_id: " + id + "}]\n", state: controller.StateError,
			is: controller.ErrState, says: []string{"is in ERROR"}},
		{name: "new instance without a hypervisor", spec: "name: new-1\nproject_id: demo\nshares: [{share_id: " + id + "}]\n",
			is: controller.ErrState, says: []string{"new-1 has no hypervisor state (hostctl serve runs with --virt none)"}},
		{name: "existing instance without a hypervisor", spec: "name: a\nproject_id: demo\nshares: [{share_id: " + id + "}]\n", state: "-",
			is: controller.ErrState, says: []string{"a has no hypervisor state"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.inst, e.rawState = e.ctl, false
			switch tc.state {
			case "":
			case "-":
				e.rawState = true
			default:
				e.inst = stateOverride{Instances: e.ctl, state: tc.state}
			}
			before := e.snapshot()
			_, err := e.ctl.Apply(ctx, []byte(tc.spec))
			if err == nil || tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("apply: %v; want %v", err, tc.is)
			}
			for _, w := range tc.says {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("apply: %v; want it to say %q", err, w)
				}
			}
			if after := e.snapshot(); after != before {
				t.Errorf("a refused apply changed something:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// TestSpecShareUndone: an apply that fails after the share service began
// attaching the spec's shares undoes them (no mapping, the share
// unlocked); nothing of it is left for the reconciler.
func TestSpecShareUndone(t *testing.T) {
	e := newEnv(t, stores(t)["bolt"](t))
	ctx := context.Background()
	u := e.instance("a", "demo")
	if _, err := e.ctl.Apply(ctx, []byte("name: b\naddresses: [10.0.0.5]\n")); err != nil {
		t.Fatal(err)
	}
	id := e.localShare("demo")
	// The address is refused after the share service's part of the apply.
	_, err := e.ctl.Apply(ctx, []byte("name: a\nproject_id: demo\naddresses: [10.0.0.5]\nshares: [{share_id: "+id+"}]\n"))
	if err == nil || !strings.Contains(err.Error(), "10.0.0.5") {
		t.Fatalf("apply with another instance's address: %v", err)
	}
	if m, ok := e.mapping(u, id); ok {
		t.Errorf("mapping left by a failed apply: %+v", m)
	}
	if sh := e.share(id); len(sh.Holders) != 0 {
		t.Errorf("share left locked by a failed apply: %+v", sh.Holders)
	}
	if evs := e.shareEvents(); len(evs) != 0 {
		t.Errorf("events of an undone attach: %+v", evs)
	}
}

// TestReconcileLeavesSpecAttachAlone: while an apply attaches the shares
// its spec names (the new instance not stored yet), the reconciler does
// not take its attaching mappings for leftovers of a deleted instance;
// once the apply is over (here: it never stored the instance), it does.
func TestReconcileLeavesSpecAttachAlone(t *testing.T) {
	e := newEnv(t, stores(t)["bolt"](t))
	ctx := context.Background()
	id := e.localShare("demo")
	const u = "0b6e4a52-1b0e-4a8e-8f7e-5d3c2b1a0f99"
	r := revert.New(slog.Default(), "apply new-1")
	if err := e.svc.attachFromSpec(ctx, r, attachTarget{UUID: u, Name: "new-1", Host: "host-a", Project: "demo"}, []shareTag{{sh: e.share(id), tag: "data"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if m, ok := e.mapping(u, id); !ok || m.Status != types.ShareAttaching || len(e.share(id).Holders) != 1 {
		t.Fatalf("the reconciler touched an attach in progress: %+v %v, holders %+v", m, ok, e.share(id).Holders)
	}
	applyErr := errors.New("the apply failed")
	r.Fail(&applyErr) // the core's revert of the failed apply
	if _, ok := e.mapping(u, id); ok || len(e.share(id).Holders) != 0 {
		t.Errorf("a failed apply left its attach: holders %+v", e.share(id).Holders)
	}
	if e.svc.isApplying(u) {
		t.Error("still marked applying")
	}
}
