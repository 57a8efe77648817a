package controller

import (
	"context"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/events"
)

// ReadEvents returns up to limit events of an audit stream after the event
// with ID after, waiting up to wait for one when there are none.
func (c *Controller) ReadEvents(ctx context.Context, stream, after string, limit int, wait time.Duration) ([]types.Event, error) {
	evs, err := c.audit.Read(ctx, stream, after, limit, wait)
	out := make([]types.Event, 0, len(evs))
	for _, e := range evs {
		out = append(out, types.Event{ID: e.ID, Time: e.Time, Host: e.Host, Type: e.Type, Payload: e.Payload})
	}
	return out, err
}

// Audit returns the controller's audit log, for the parts that emit
// events.
func (c *Controller) Audit() *events.Log { return c.audit }

// Audit streams of the instance changes and of the images the core
// makes and deletes (snapshots, shelved images); hostctl/catalog emits
// the flavors' and the imported images'.
const (
	StreamImages    = "images"
	StreamInstances = "instances"
)

// emit writes an audit event after a change committed; a failure to
// append it is logged (by the audit log) and does not undo the change.
func (c *Controller) emit(ctx context.Context, stream, typ string, payload any) {
	if c.audit != nil {
		_, _ = c.audit.Emit(ctx, stream, typ, payload)
	}
}
