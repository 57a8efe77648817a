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

// TestHotplugServedOutsideTheCore (issue 22, items 1 and 4): the admin
// API's disk and NIC hot-plug is served by hostctl/ops, and the
// controller no longer offers it (the operations left the core).
func TestHotplugServedOutsideTheCore(t *testing.T) {
	if implements[api.HotplugService]((*controller.Controller)(nil)) {
		t.Error("the controller serves api.HotplugService: that belongs to hostctl/ops")
	}
	dir := t.TempDir()
	st := stores.BoltIn(t, dir)
	c := controller.New(st, controller.Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	s := adminServices(c, catalog.New(catalog.Options{}), nil, nil, keyService{}, nil, nil)
	if _, ok := s.Hotplug.(*ops.Ops); !ok {
		t.Errorf("hot-plug served by %T, want hostctl/ops", s.Hotplug)
	}
}
