package controller

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// The optional phases of the parts (hostctl/part: Completer, Committer),
// called like the others (parts.go): in registration order, for the
// parts that implement them and act on the operation.

// completeParts lets every part that completes specs and acts on op
// complete in before anything of op is checked; r undoes what they did.
func (c *Controller) completeParts(ctx context.Context, op part.Op, r *revert.Reverter, in *model.Instance) error {
	for _, p := range c.parts {
		cp, ok := p.(part.Completer)
		if !ok || p.Answers()[op].Do != part.Act {
			continue
		}
		if err := cp.Complete(ctx, op, &part.Instance{Spec: in}, r); err != nil {
			return fmt.Errorf("%s %s: %s: %w", op, in.Name, p.Name(), err)
		}
	}
	return nil
}

// committedParts tells every part that acts on op that op stands, and
// returns their notes (warnings, what a force-delete leaves behind).
func (c *Controller) committedParts(ctx context.Context, op part.Op, in *model.Instance, host string) []string {
	var notes []string
	for _, p := range c.parts {
		if cp, ok := p.(part.Committer); ok && p.Answers()[op].Do == part.Act {
			notes = append(notes, cp.Committed(ctx, op, &part.Instance{Spec: in, Host: host})...)
		}
	}
	return notes
}
