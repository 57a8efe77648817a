package controller

import (
	"context"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/view"

	faultspart "github.com/vmeta/vmeta/hostctl/parts/faults"
)

// The faults part (hostctl/parts/faults) for this package's tests: the
// harness registers it as the daemon does (registerParts), and setFault
// puts an instance in ERROR as a start whose share mount failed does.

// The faults part plays the roles the core finds it by.
var (
	_ part.StartFailer = (*faultspart.Part)(nil)
	_ view.Faults      = (*faultspart.Part)(nil)
)

// faultsPart is the faults part over c's records.
func faultsPart(c *Controller) *faultspart.Part { return faultspart.New(c.records, c.log) }

// setFault puts the instance uuid (named name) in ERROR through c's
// faults part (registered first when c has none).
func (c *Controller) setFault(ctx context.Context, uuid, name, reason string) error {
	for _, p := range c.parts {
		if f, ok := p.(*faultspart.Part); ok {
			return f.SetFault(ctx, uuid, name, reason)
		}
	}
	f := faultsPart(c)
	c.parts = append(c.parts, f)
	return f.SetFault(ctx, uuid, name, reason)
}
