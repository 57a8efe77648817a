package controller

import (
	"context"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/metadata"
)

// transports says which metadata revision each transport carries for an
// instance: the metadata service (what the store serves), the config
// drive (the medium in the cdrom of a running domain, else the drive the
// next boot reads) and those of the parts (the firmware entries), as
// the parts tell them (phases.go).
func (c *Controller) transports(ctx context.Context, inst *Instance, tree *metadata.Tree) []part.Transport {
	var out []part.Transport
	if tree != nil {
		out = append(out, part.Transport{Name: types.TransportHTTP, Revision: metadata.TreeRevision(tree)})
	}
	if c.domains == nil {
		return out
	}
	running := inst.State != "" && inst.State != "shutoff" && inst.State != StateMissing && inst.State != StateUnknown
	out = append(out, c.driveTransport(ctx, inst.Spec.Name, running)...) // phases.go
	var stored int64
	if tree != nil {
		stored = metadata.TreeRevision(tree)
	}
	return append(out, c.partTransports(ctx, inst.Spec, running, stored)...)
}
