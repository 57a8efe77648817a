package controller

import "context"

// The core as the shares part (hostctl/shares) calls it: its
// shares.Instances, with Reapply (core_nicspart.go) and Capabilities
// (core_ops.go); its live attach and detach go through hostctl/ops
// (liveshares.go). It names no type of this package, so that
// hostctl/shares does not import it.

// DomainState is the instance's state as Get gives it ("" without a
// hypervisor).
func (c *Controller) DomainState(ctx context.Context, name string) (string, error) {
	inst, err := c.Get(ctx, name)
	if err != nil {
		return "", err
	}
	return inst.State, nil
}
