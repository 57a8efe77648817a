package controller

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/store"
)

// TestAttachNICRefusesAnotherInstancesMAC: a hot-plugged NIC cannot take
// the MAC of another instance's NIC (an apply refuses the same); the
// refusal names the MAC and the other instance, and changes nothing.
func TestAttachNICRefusesAnotherInstancesMAC(t *testing.T) {
	e := newEnv(t)
	e.mustApply(hvSpec)
	e.mustApply("name: app-2\naddresses: [10.1.0.8]\nnics: [{mac: \"52:54:00:00:00:09\", tag: only}]\n")
	before := e.snapshot()
	_, err := e.c.AttachNIC(context.Background(), "app-2", types.NICRequest{Tag: "stolen", MAC: "52:54:00:00:00:01"})
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), `"52:54:00:00:00:01"`) || !strings.Contains(err.Error(), "app-1") {
		t.Fatalf("attach of app-1's MAC to app-2: %v; want a conflict naming the MAC and app-1", err)
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused attach changed something:\n%s", diffLines(before, after))
	}
	if _, err := e.c.AttachNIC(context.Background(), "app-2", types.NICRequest{Tag: "fresh", MAC: "52:54:00:00:00:0a"}); err != nil {
		t.Fatalf("attach of a free MAC: %v", err)
	}
}

// TestNICHotPlugMACClaims: a hot-plugged NIC's MAC is claimed in the
// store (a hot-plug that fails at any step of the hypervisor gives it
// back), and a detached NIC's MAC is released: another instance may
// then take it.
func TestNICHotPlugMACClaims(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.mustApply(hvSpec)
	e.mustApply("name: app-2\naddresses: [10.1.0.8]\nnics: [{mac: \"52:54:00:00:00:09\", tag: only}]\n")
	const mac = "52:54:00:00:00:0a"
	claimed := func() bool {
		t.Helper()
		_, err := e.st.Record(ctx, "nic-mac/"+mac)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	k := 1
	for ; ; k++ {
		e.hv.mu.Lock()
		e.hv.failAt = len(e.hv.calls) + k
		e.hv.mu.Unlock()
		_, err := e.c.AttachNIC(ctx, "app-2", types.NICRequest{Tag: "extra", MAC: mac})
		if err == nil {
			break
		}
		if !errors.Is(err, errInjected) {
			t.Fatalf("attach failing at hypervisor call %d: %v", k, err)
		}
		if claimed() {
			t.Fatalf("an attach failing at hypervisor call %d left the MAC claimed", k)
		}
	}
	if k == 1 {
		t.Fatal("no hypervisor call of the attach failed: the fault injection missed")
	}
	t.Logf("the attach failed at each of its first %d hypervisor calls", k-1)
	if !claimed() {
		t.Fatal("the attached NIC's MAC is not claimed")
	}
	if _, err := e.c.AttachNIC(ctx, "app-1", types.NICRequest{Tag: "stolen", MAC: mac}); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "app-2") {
		t.Fatalf("attach of app-2's new MAC to app-1: %v", err)
	}
	if _, err := e.c.DetachNIC(ctx, "app-2", types.DetachRequest{MAC: mac}); err != nil {
		t.Fatal(err)
	}
	if claimed() {
		t.Fatal("the detached NIC's MAC is still claimed")
	}
	if _, err := e.c.AttachNIC(ctx, "app-1", types.NICRequest{Tag: "taken-over", MAC: mac}); err != nil {
		t.Fatalf("attach of the detached NIC's MAC to app-1: %v", err)
	}
}
