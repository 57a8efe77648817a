package controller

import (
	"context"
	"fmt"
)

// RunningXML is the running domain's XML of instance name (its inactive
// XML when it does not run): the live device changes of hostctl/ops
// (liveshares.go) read it while a detached device leaves.
func (c *Controller) RunningXML(ctx context.Context, name string) ([]byte, error) {
	if c.domains == nil {
		return nil, fmt.Errorf("%s: %w: this host runs without a hypervisor (--virt none)", name, ErrState)
	}
	return c.domains.XML(ctx, name, true)
}
