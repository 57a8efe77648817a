package controller

import (
	"context"
	"log/slog"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/vmstate"
	"github.com/vmeta/vmeta/internal/revert"
)

// The instances' states (shelved, rescued) are kept by the vmstate part
// (hostctl/parts/vmstate), which the daemon registers first among the
// parts; the harness registers it as the daemon does (boundStates, in
// registerParts), and this package's tests read and write the states
// through it under the names they had in the core.

// States of an instance kept by the vmstate part.
const (
	StateShelved = vmstate.Shelved
	StateRescue  = vmstate.Rescue
)

// vmStatePrefix is the prefix of the state records' keys.
const vmStatePrefix = vmstate.KeyPrefix

// vmState is the record of a shelved or rescued instance.
type vmState = vmstate.Record

// boundStates is the vmstate part over c's records, bound to c as the
// daemon binds it (hostctl/daemon, parts.go).
func boundStates(c *Controller) *vmstate.Part {
	p := vmstate.New(c.records, c.hostName)
	p.Bind(c.imageDir, c, slog.New(slog.DiscardHandler))
	return p
}

// withStates registers the vmstate part first among c's parts (a
// controller the harness made without it).
func withStates(c *Controller) *Controller {
	c.parts = append([]part.Part{boundStates(c)}, c.parts...)
	return c
}

// statesPart is c's vmstate part (one over its records when none is
// registered).
func (c *Controller) statesPart() *vmstate.Part {
	for _, p := range c.parts {
		if s, ok := p.(*vmstate.Part); ok {
			return s
		}
	}
	return boundStates(c)
}

// vmStateOf returns the instance's state record (State "" when it has
// none) and the record's version.
func (c *Controller) vmStateOf(ctx context.Context, uuid string) (vmState, int64, error) {
	return c.statesPart().Of(ctx, uuid)
}

// putVMState stores st as the instance's state and registers its removal
// on r.
func (c *Controller) putVMState(ctx context.Context, r *revert.Reverter, uuid string, st vmState) error {
	return c.statesPart().Put(ctx, r, uuid, st)
}
