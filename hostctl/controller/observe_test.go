package controller_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
)

// observed is a hand-written Options.Observe: it records every call.
type observed struct {
	mu  sync.Mutex
	ops []string
}

func (o *observed) observe(op string, took time.Duration, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	res := "ok"
	if err != nil {
		res = "failed"
	}
	if took < 0 {
		res = "negative duration"
	}
	o.ops = append(o.ops, op+" "+res)
}

// TestObserve: every operation is reported once as it ends, failed ones
// too, and reads are not.
func TestObserve(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := bolt.Open(filepath.Join(dir, "vmeta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var o observed
	c := controller.New(st, controller.Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler), Observe: o.observe})

	if _, err := c.Apply(ctx, []byte(spec)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	// Without a hypervisor there is no domain to start or attach to.
	if _, err := c.Start(ctx, "app-1"); err == nil {
		t.Error("start without a hypervisor succeeded")
	}
	if _, err := c.AttachDisk(ctx, "app-1", types.DiskRequest{Tag: "logs"}); err == nil {
		t.Error("attach without a hypervisor succeeded")
	}
	if err := c.Delete(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("delete of a missing instance: %v", err)
	}
	if err := c.Delete(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	want := []string{"apply ok", "start failed", "attach_disk failed", "delete failed", "delete ok"}
	if len(o.ops) != len(want) {
		t.Fatalf("observed %q, want %q", o.ops, want)
	}
	for i := range want {
		if o.ops[i] != want[i] {
			t.Errorf("observed %q, want %q", o.ops, want)
			break
		}
	}
}
