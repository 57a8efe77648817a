package daemon

import (
	"log/slog"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/catalog"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/ops"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// TestRebootServedOutsideTheCore (issue 22, items 1 and 4): the admin
// API's reboot, soft and hard, is served by hostctl/ops, and the
// controller no longer offers it (the operation left the core).
func TestRebootServedOutsideTheCore(t *testing.T) {
	if implements[api.RebootService]((*controller.Controller)(nil)) {
		t.Error("the controller serves api.RebootService: that belongs to hostctl/ops")
	}
	dir := t.TempDir()
	st := stores.BoltIn(t, dir)
	c := controller.New(st, controller.Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	s := adminServices(c, catalog.New(catalog.Options{}), nil, nil, keyService{}, nil, nil)
	if _, ok := s.Reboot.(*ops.Ops); !ok {
		t.Errorf("reboot served by %T, want hostctl/ops", s.Reboot)
	}
}
