package controller

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/internal/model"
)

// The core as parts call it back: hostctl/shares' shares.Instances
// (with Capabilities, core_ops.go), hostctl/parts/passthrough's Core, and
// the running XML the device changes of hostctl/ops (devicechange.go;
// the shares part's live attach and detach go through them) read. It
// names no type of this package, so that the parts do not import it.

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

// RunningXML is the running domain's XML of instance name (its inactive
// XML when it does not run): the device changes of hostctl/ops
// (devicechange.go) read it before a change and while a detached device
// leaves.
func (c *Controller) RunningXML(ctx context.Context, name string) ([]byte, error) {
	if c.domains == nil {
		return nil, fmt.Errorf("%s: %w: this host runs without a hypervisor (--virt none)", name, ErrState)
	}
	return c.domains.XML(ctx, name, true)
}
