package controller

import (
	"context"
	"strings"

	"github.com/vmeta/vmeta/internal/store"
)

// What hostctl's metrics (hostctl/metrics) need of the core at every
// scrape: the state each instance is counted under.

// InstanceStates returns, for each of recs (instance records as the store
// lists them; only Name, UUID and Host are read), the State ListAll shows
// for it ("" where ListAll's is empty: another host's instance, or no
// hypervisor). It reads only what is live — libvirt's domain list (one
// call, when recs is not empty), the fault and state records — and never
// decodes, renders or validates a spec, so a scrape does not pay for
// every instance's publish-time work again.
func (c *Controller) InstanceStates(ctx context.Context, recs []store.Instance) ([]string, error) {
	stateOf := c.drv.lister(ctx, len(recs) > 0)
	faults, err := c.faults(ctx)
	if err != nil {
		return nil, err
	}
	vmStates, err := c.states().States(ctx) // core_vmstate.go
	if err != nil {
		return nil, err
	}
	out := make([]string, len(recs))
	for i, rec := range recs {
		if c.owns(rec) { // as list: the fault shows in the state of own instances only
			inst := Instance{State: stateOf(rec.Name, rec.UUID)}
			showFault(&inst, faultFor(faults, rec.UUID))
			out[i] = inst.State
		}
		if st := vmStates[strings.ToLower(rec.UUID)]; st != "" {
			out[i] = st
		}
	}
	return out, nil
}
