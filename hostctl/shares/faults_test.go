//go:build vmetacrash

// The step hook these tests use exists only in builds with the vmetacrash
// tag (step_on.go): `make test` runs them with
// `go test -tags vmetacrash ./hostctl/shares/`.

package shares

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

var errInjected = errors.New("injected failure")

// injectAt makes the step named at fail (once) for the rest of the test.
func injectAt(t *testing.T, at string) {
	t.Helper()
	stepHook = func(step string) error {
		if step == at {
			return fmt.Errorf("step %s: %w", step, errInjected)
		}
		return nil
	}
	t.Cleanup(func() { stepHook = nil })
}

// TestAttachFaults: a failure at each step of an attach undoes the steps
// before it: no mapping, no lock, the share neither in the spec nor in
// the metadata.
func TestAttachFaults(t *testing.T) {
	for _, step := range []string{"lock", "apply", "inactive"} {
		t.Run(step, func(t *testing.T) {
			e := newEnv(t, stores(t)["bolt"](t))
			u := e.instance("a", "demo")
			id := e.localShare("demo")
			injectAt(t, step)
			_, err := e.svc.AttachShare(context.Background(), admin, "a", types.ServerShareAttach{ShareID: id})
			if !errors.Is(err, errInjected) {
				t.Fatalf("attach: %v", err)
			}
			e.wantDetached("after a failed attach", u, "a", id)
			if evs := e.shareEvents(); len(evs) != 0 {
				t.Errorf("events %v after a failed attach", evs)
			}
		})
	}
}

// TestDetachFaults: a detach that fails at any step leaves the mapping
// detaching (never half-attached); the reconciler completes it.
func TestDetachFaults(t *testing.T) {
	for _, step := range []string{"detach-apply", "unlock", "delete-mapping"} {
		t.Run(step, func(t *testing.T) {
			e := newEnv(t, stores(t)["bolt"](t))
			ctx := context.Background()
			u := e.instance("a", "demo")
			id := e.localShare("demo")
			if _, err := e.svc.AttachShare(ctx, admin, "a", types.ServerShareAttach{ShareID: id}); err != nil {
				t.Fatal(err)
			}
			injectAt(t, step)
			if _, err := e.svc.DetachShare(ctx, admin, "a", id, false); !errors.Is(err, errInjected) {
				t.Fatalf("detach: %v", err)
			}
			if m, _ := e.mapping(u, id); m.Status != types.ShareDetaching {
				t.Errorf("mapping %q after a failed detach, want detaching", m.Status)
			}
			stepHook = nil
			if err := e.svc.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			e.wantDetached("after the reconciler", u, "a", id)
		})
	}
}
