package controller

import (
	"context"

	"github.com/vmeta/vmeta/hostctl/part"
)

// The states hostctl gives an instance besides its domain's (shelved,
// rescued) are kept by a part (hostctl/parts/vmstate, registered by the
// daemon): its Check refuses what a state does not allow, its other
// phases follow delete, force-delete and adopt. What the core needs of
// the states beyond the phases — showing them, leaving such an instance
// to its operations in the reconciler — it asks the registered part that keeps them
// (instanceStates); without one, no instance has a state.

// instanceStates is the part that keeps the instances' states.
type instanceStates interface {
	// State is the instance's state ("": none).
	State(ctx context.Context, uuid string) (string, error)
	// States are the states of the instances that have one, by
	// lower-case UUID.
	States(ctx context.Context) (map[string]string, error)
}

// states is the registered part that keeps the instances' states.
func (c *Controller) states() instanceStates {
	if s, ok := part.First[instanceStates](c.parts, ""); ok {
		return s
	}
	return noStates{}
}

// noStates: no part keeps states.
type noStates struct{}

func (noStates) State(context.Context, string) (string, error)     { return "", nil }
func (noStates) States(context.Context) (map[string]string, error) { return nil, nil }

// PowerState is the state of instance name's domain as list shows it
// ("running", "shutoff"; "" without a hypervisor).
func (c *Controller) PowerState(ctx context.Context, name, uuid string) string {
	return c.drv.state(ctx, name, uuid)
}
