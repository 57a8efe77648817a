package controller

import (
	"context"

	"github.com/vmeta/vmeta/internal/model"
)

// The core as parts call it back (hostctl/shares' shares.Instances, with
// Capabilities in core_ops.go; hostctl/parts/passthrough's Core). It
// names no type of this package, so that those do not import it.

// DomainState is the instance's state as Get gives it ("" without a
// hypervisor).
func (c *Controller) DomainState(ctx context.Context, name string) (string, error) {
	inst, err := c.Get(ctx, name)
	if err != nil {
		return "", err
	}
	return inst.State, nil
}

// Reapply applies in again (ApplyInstance: it takes the instance's lock).
func (c *Controller) Reapply(ctx context.Context, in *model.Instance) error {
	_, err := c.ApplyInstance(ctx, in)
	return err
}
