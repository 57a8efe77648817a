package controller

import (
	"context"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/metadata"
)

// transports says which metadata revision each transport carries for an
// instance: the metadata service (what the store serves), then those of
// the parts that carry it by a way of their own (part.Transporter: the
// config drive, the firmware entries), as they tell it.
func (c *Controller) transports(ctx context.Context, inst *Instance, tree *metadata.Tree) []part.Transport {
	var out []part.Transport
	var stored int64
	if tree != nil {
		stored = metadata.TreeRevision(tree)
		out = append(out, part.Transport{Name: types.TransportHTTP, Revision: stored})
	}
	if c.domains == nil {
		return out
	}
	running := inst.State != "" && inst.State != "shutoff" && inst.State != StateMissing && inst.State != StateUnknown
	for _, p := range part.Acting[part.Transporter](c.parts, "") {
		out = append(out, p.Transport(ctx, &part.Instance{Spec: inst.Spec}, running, stored))
	}
	return out
}
