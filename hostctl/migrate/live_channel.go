package migrate

import (
	"context"
	"fmt"
	"net/http"
)

// The host channel's routes of a live move (the destination's side of
// LiveDestination), each authorised like the others against the store's
// move record: the source the record names asks, for a move to this
// host, while it is migrating.

func (c *Channel) liveRoutes(mux *http.ServeMux) {
	live := func(fn func(ctx context.Context, ld LiveDestination, rec Record) (any, error)) http.HandlerFunc {
		return c.serve(func(ctx context.Context, rec Record, _ *http.Request) (any, error) {
			ld, ok := c.Local.(LiveDestination)
			if !ok || rec.Live == nil {
				return nil, fmt.Errorf("%w: this host receives no live migration", ErrState)
			}
			return fn(ctx, ld, rec)
		}, Migrating)
	}
	mux.HandleFunc("POST /v1/moves/{uuid}/live/prepare", live(func(ctx context.Context, ld LiveDestination, rec Record) (any, error) {
		return ld.PrepareLive(ctx, rec)
	}))
	mux.HandleFunc("POST /v1/moves/{uuid}/live/state", live(func(ctx context.Context, ld LiveDestination, rec Record) (any, error) {
		return ld.DomainState(ctx, rec)
	}))
	mux.HandleFunc("POST /v1/moves/{uuid}/live/finish", live(func(ctx context.Context, ld LiveDestination, rec Record) (any, error) {
		return nil, ld.FinishLive(ctx, rec)
	}))
}

func (cl *client) PrepareLive(ctx context.Context, rec Record) (LiveTarget, error) {
	var t LiveTarget
	err := cl.do(ctx, http.MethodPost, movePath(rec, "live/prepare"), nil, 0, &t)
	return t, err
}

func (cl *client) DomainState(ctx context.Context, rec Record) (string, error) {
	var s string
	err := cl.do(ctx, http.MethodPost, movePath(rec, "live/state"), nil, 0, &s)
	return s, err
}

func (cl *client) FinishLive(ctx context.Context, rec Record) error {
	return cl.do(ctx, http.MethodPost, movePath(rec, "live/finish"), nil, 0, nil)
}

var _ LiveDestination = (*client)(nil)
