package shares

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
)

// TestAttachOnlyShutoff: a share is attached only to a SHUTOFF instance
// (the specification); in ERROR, without a hypervisor (no domain state),
// running, paused, missing or unknown the attach is refused with 409
// naming the state, and nothing changes. Issue 20, item 18.
func TestAttachOnlyShutoff(t *testing.T) {
	for _, tc := range []struct {
		state string // "" with rawState: the controller's own (no hypervisor)
		says  string
	}{
		{state: "shutoff"},
		{state: "", says: "has no hypervisor state (hostctl serve runs with --virt none)"},
		{state: controller.StateError, says: "is in ERROR; shares are attached to SHUTOFF instances only"},
		{state: "running", says: "the instance is running; shares are attached to SHUTOFF instances"},
		{state: "paused", says: "the instance is paused"},
		{state: controller.StateMissing, says: "the instance is missing"},
		{state: controller.StateUnknown, says: "the instance is unknown"},
	} {
		t.Run("state="+tc.state, func(t *testing.T) {
			e := newEnv(t, stores(t)["bolt"](t))
			ctx := context.Background()
			u := e.instance("a", "demo")
			id := e.localShare("demo")
			if tc.state == "" {
				e.rawState = true
			} else {
				e.inst = stateOverride{Instances: e.ctl, state: tc.state}
			}
			before := e.snapshot()
			_, err := e.svc.AttachShare(ctx, admin, "a", types.ServerShareAttach{ShareID: id, Tag: "data"})
			if tc.says == "" {
				if err != nil {
					t.Fatal(err)
				}
				if m, ok := e.mapping(u, id); !ok || m.Status != types.ShareInactive {
					t.Errorf("mapping %+v %v, want inactive", m, ok)
				}
				return
			}
			if !errors.Is(err, controller.ErrState) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("attach in state %q: %v; want ErrState saying %q", tc.state, err, tc.says)
			}
			if after := e.snapshot(); after != before {
				t.Errorf("a refused attach changed something:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// errorMapping attaches an NFS share to a new instance "a", plays a start
// and a stop whose unmount fails: the mapping is left in error with the
// share still mounted.
func errorMapping(t *testing.T, e *env) (uuid, id string) {
	t.Helper()
	ctx := context.Background()
	u := e.instance("a", "demo")
	id = e.nfsShare("demo", "filer:/x")
	e.attach("a", id)
	if err := e.svc.PrepareStart(ctx, u); err != nil {
		t.Fatal(err)
	}
	e.svc.StartDone(ctx, u, nil)
	e.run.mu.Lock()
	e.run.fail = map[string]string{"umount": "umount.nfs4: device is busy"}
	e.run.mu.Unlock()
	e.svc.Stopped(ctx, u)
	if m, _ := e.mapping(u, id); m.Status != types.ShareError || !strings.Contains(m.Error, "device is busy") {
		t.Fatalf("after a stop whose unmount failed: %+v, want error", m)
	}
	return u, id
}

func (e *env) umounts() int {
	n := 0
	for _, c := range e.run.Calls() {
		if strings.HasPrefix(c, "umount ") {
			n++
		}
	}
	return n
}

// TestReconcileErrorToInactive: a mapping left in error by a failed
// unmount is retried by the reconciler on every pass, and moves back to
// inactive once the unmount succeeds (it used to stay in error for good).
// Issue 20, item 17.
func TestReconcileErrorToInactive(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, open(t))
			ctx := context.Background()
			u, id := errorMapping(t, e)
			tries := e.umounts()
			if err := e.svc.Reconcile(ctx); err == nil || !strings.Contains(err.Error(), "still in error") {
				t.Errorf("reconcile while the unmount still fails: %v", err)
			}
			if m, _ := e.mapping(u, id); m.Status != types.ShareError {
				t.Errorf("mapping %+v, want still error", m)
			}
			if e.umounts() <= tries {
				t.Errorf("the reconciler did not retry the unmount: %q", e.run.Calls())
			}
			e.run.mu.Lock()
			e.run.fail = nil
			e.run.mu.Unlock()
			if err := e.svc.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			m, _ := e.mapping(u, id)
			if m.Status != types.ShareInactive || m.Error != "" {
				t.Errorf("after a successful unmount: %+v, want inactive", m)
			}
			if mounted, _ := e.svc.mounts.mounted(id); mounted {
				t.Error("the share is still mounted on the host")
			}
			// The lock and the mapping stay: the share is still attached.
			if sh := e.share(id); len(sh.Holders) != 1 {
				t.Errorf("holders %+v", sh.Holders)
			}
		})
	}
}

// TestStartNeedsInactiveMappings: a start proceeds only with inactive
// mappings; one in error is made inactive first (its unmount retried) and
// refuses the start, naming it, while that fails. Issue 20, item 18.
func TestStartNeedsInactiveMappings(t *testing.T) {
	e := newEnv(t, stores(t)["bolt"](t))
	ctx := context.Background()
	u, id := errorMapping(t, e)
	mounts := len(e.run.Calls())
	err := e.svc.PrepareStart(ctx, u)
	if !errors.Is(err, controller.ErrState) || !strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), "is in error") {
		t.Fatalf("start with a mapping in error: %v; want ErrState naming the share", err)
	}
	for _, c := range e.run.Calls()[mounts:] {
		if strings.HasPrefix(c, "mount ") {
			t.Errorf("a refused start mounted: %q", c)
		}
	}
	if m, _ := e.mapping(u, id); m.Status != types.ShareError {
		t.Errorf("mapping %+v, want error", m)
	}
	e.run.mu.Lock()
	e.run.fail = nil
	e.run.mu.Unlock()
	if err := e.svc.PrepareStart(ctx, u); err != nil {
		t.Fatalf("start once the unmount succeeds: %v", err)
	}
	e.svc.StartDone(ctx, u, nil)
	if m, _ := e.mapping(u, id); m.Status != types.ShareActive {
		t.Errorf("mapping %+v, want active", m)
	}
}
