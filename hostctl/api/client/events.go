package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// Events returns up to limit events of an audit stream after the event
// with ID after ("" for the first), the daemon waiting up to wait for one
// when there are none (a long poll; see GET /v1/events/{stream}).
func (c *Client) Events(ctx context.Context, stream, after string, limit int, wait time.Duration) ([]types.Event, error) {
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	var out []types.Event
	return out, c.do(ctx, http.MethodGet, "/v1/events/"+url.PathEscape(stream)+"?"+q.Encode(), nil, &out)
}

// Follow calls fn with every event of stream after the one with ID after,
// oldest first, as they come, until ctx is done (then it returns nil) or
// fn or a request fails.
func (c *Client) Follow(ctx context.Context, stream, after string, fn func(types.Event) error) error {
	for {
		evs, err := c.Events(ctx, stream, after, 0, 30*time.Second)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if err := fn(ev); err != nil {
				return err
			}
			after = ev.ID
		}
	}
}
