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
