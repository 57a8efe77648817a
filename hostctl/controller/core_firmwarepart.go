package controller

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// The parts that carry the published metadata to the guest by a way of
// their own (part.Publisher: the firmware entries, hostctl/parts/firmware)
// are called on every publish, for the instance show and by the
// reconciler.

// publishParts hands tree (revision rev) to every Publisher part, before
// the store write; their undo steps go on r. The returned function runs
// what they do once the write succeeded.
func (c *Controller) publishParts(ctx context.Context, r *revert.Reverter, in *model.Instance, tree *metadata.Tree, rev int64) (func(), error) {
	var commits []func()
	for _, p := range c.parts {
		pub, ok := p.(part.Publisher)
		if !ok {
			continue
		}
		commit, err := pub.Publish(ctx, &part.Instance{Spec: in}, tree, rev, r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name(), err)
		}
		if commit != nil {
			commits = append(commits, commit)
		}
	}
	return func() {
		for _, f := range commits {
			f()
		}
	}, nil
}

// partTransports says which revision each Publisher part carries for in
// (stored: the stored metadata's revision, 0 when none).
func (c *Controller) partTransports(ctx context.Context, in *model.Instance, running bool, stored int64) []part.Transport {
	var out []part.Transport
	for _, p := range c.parts {
		if pub, ok := p.(part.Publisher); ok {
			out = append(out, pub.Transport(ctx, &part.Instance{Spec: in}, running, stored))
		}
	}
	return out
}
