package controller

import "context"

// The core as the shares part (hostctl/shares) calls it: its
// shares.Instances (its live attach and detach go through hostctl/ops,
// liveshares.go). They name no type of this package, so that
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

// Hypervisor reports whether instances have domains here (false with
// --virt none).
func (c *Controller) Hypervisor() bool {
	_, ok := c.drv.(libvirtDriver)
	return ok
}
