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
