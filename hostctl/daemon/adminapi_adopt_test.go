package daemon

import (
	"context"
	"log/slog"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/catalog"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/ops"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// TestAdoptServedOutsideTheCore (issue 22, items 1 and 4): the admin
// API's adopt of a dead host's instance is served by hostctl/ops, and the
// controller no longer offers it (the operation left the core).
func TestAdoptServedOutsideTheCore(t *testing.T) {
	type adopter interface {
		Adopt(ctx context.Context, name string) (*controller.Instance, error)
	}
	if implements[adopter]((*controller.Controller)(nil)) {
		t.Error("the controller adopts instances: that belongs to hostctl/ops")
	}
	if s := ownershipServices(t); s.Ownership == nil {
		t.Error("adopt is not served")
	} else if _, ok := s.Ownership.(*ops.Ops); !ok {
		t.Errorf("adopt served by %T, want hostctl/ops", s.Ownership)
	}
}

// TestForceDeleteServedOutsideTheCore: the same for the forced delete of
// a dead host's instance from the store.
func TestForceDeleteServedOutsideTheCore(t *testing.T) {
	type forceDeleter interface {
		ForceDeleteFromStore(ctx context.Context, name string) ([]string, error)
	}
	if implements[forceDeleter]((*controller.Controller)(nil)) || implements[api.OwnershipService]((*controller.Controller)(nil)) {
		t.Error("the controller deletes another host's instances from the store: that belongs to hostctl/ops")
	}
	if s := ownershipServices(t); s.Ownership == nil {
		t.Error("the forced delete is not served")
	} else if _, ok := s.Ownership.(*ops.Ops); !ok {
		t.Errorf("the forced delete served by %T, want hostctl/ops", s.Ownership)
	}
}

// ownershipServices are the admin API's services as the daemon wires
// them over a controller on a fresh store.
func ownershipServices(t *testing.T) api.Services {
	t.Helper()
	dir := t.TempDir()
	st := stores.BoltIn(t, dir)
	c := controller.New(st, controller.Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	return adminServices(c, catalog.New(catalog.Options{}), nil, nil, keyService{}, nil, nil)
}
