package controller

import (
	"context"

	"github.com/vmeta/vmeta/hostctl/events"
)

// Audit streams of the instance changes and of the images the core
// makes and deletes (snapshots, shelved images); hostctl/catalog emits
// the flavors' and the imported images'.
const (
	StreamImages    = "images"
	StreamInstances = events.StreamInstances
)

// Emit records an event on the audit log's stream after a change
// committed; a failure to
// append it is logged (by the audit log) and does not undo the change.
func (c *Controller) Emit(ctx context.Context, stream, typ string, payload any) {
	if c.audit != nil {
		_, _ = c.audit.Emit(ctx, stream, typ, payload)
	}
}
