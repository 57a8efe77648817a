package controller

import "context"

// The adopt and the forced delete of a dead host's instance live in
// hostctl/ops (adopt.go, forcedelete.go); this package's tests drive them
// as c.Adopt(...) and c.ForceDeleteFromStore(...) through the operations
// of export_ops_test.go (opsOf: hostctl/ops over the controller under
// test), which serve them besides Operations.

// ownershipOps are the operations on another host's instance.
type ownershipOps interface {
	Adopt(ctx context.Context, name string) (*Instance, error)
	ForceDeleteFromStore(ctx context.Context, name string) ([]string, error)
}

func (c *Controller) Adopt(ctx context.Context, name string) (*Instance, error) {
	return opsOf(c).(ownershipOps).Adopt(ctx, name)
}

func (c *Controller) ForceDeleteFromStore(ctx context.Context, name string) ([]string, error) {
	return opsOf(c).(ownershipOps).ForceDeleteFromStore(ctx, name)
}
