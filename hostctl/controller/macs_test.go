package controller_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/store"
)

// TestApplyRefusesAnotherInstancesMAC: a NIC MAC address names one NIC;
// a spec giving a NIC the MAC of another instance's NIC is refused (409,
// naming the field, the MAC and the other instance) and nothing is
// stored, while re-applying the owner keeps working and the MAC is free
// again once its owner is deleted.
func TestApplyRefusesAnotherInstancesMAC(t *testing.T) {
	ctx := context.Background()
	c, st, _, _ := newController(t)
	if _, err := c.Apply(ctx, []byte(spec)); err != nil {
		t.Fatal(err)
	}
	second := "name: app-2\naddresses: [10.1.0.8]\nnics: [{mac: \"52:54:00:00:00:09\"}, {mac: \"52:54:00:00:00:01\"}]\n"
	_, err := c.Apply(ctx, []byte(second))
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), `nics[1].mac: "52:54:00:00:00:01"`) || !strings.Contains(err.Error(), "app-1") {
		t.Fatalf("second instance with app-1's MAC: err = %v, want a conflict on nics[1].mac naming app-1", err)
	}
	if _, err := st.Instance(ctx, "app-2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused instance was stored: %v", err)
	}
	if _, err := c.Apply(ctx, []byte(spec)); err != nil {
		t.Fatalf("re-applying the MAC's owner: %v", err)
	}
	if err := c.Delete(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Apply(ctx, []byte(second)); err != nil {
		t.Fatalf("the MAC once its owner is deleted: %v", err)
	}
}
