package ops

import (
	"context"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
)

// MACClaims is a part that claims the MAC addresses of an instance's
// NICs in the store (hostctl/parts/nics): a NIC hot-plug claims the new
// NIC's before it plugs it (a MAC another instance holds is refused,
// nothing changed), and a detach lets go of the NIC's once it is gone.
// end takes the operation's outcome: an error gives back what the claim
// took, nil releases the MACs old has and in has not.
type MACClaims interface {
	ClaimMACs(ctx context.Context, op string, in, old *model.Instance) (end func(context.Context, error), err error)
}

// macClaimers are the parts among ps that claim MAC addresses.
func macClaimers(ps []part.Part) []MACClaims {
	var out []MACClaims
	for _, p := range ps {
		if m, ok := p.(MACClaims); ok {
			out = append(out, m)
		}
	}
	return out
}

// claimMACs has every MAC claimer claim in's MACs for op (old: the spec
// before); end hands them the operation's outcome.
func (o *hotplugger) claimMACs(ctx context.Context, op string, in, old *model.Instance) (end func(context.Context, error), err error) {
	var ends []func(context.Context, error)
	end = func(ctx context.Context, err error) {
		for i := len(ends) - 1; i >= 0; i-- {
			ends[i](ctx, err)
		}
	}
	for _, m := range o.macs {
		e, err := m.ClaimMACs(ctx, op, in, old)
		if err != nil {
			end(ctx, err)
			return nil, err
		}
		ends = append(ends, e)
	}
	return end, nil
}
