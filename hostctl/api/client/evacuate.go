package client

import (
	"context"
	"net/http"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// Evacuate rebuilds the instance name, whose host is down, on host (the
// host this client talks to); it returns once the instance runs there.
func (c *Client) Evacuate(ctx context.Context, name, host string) (types.Evacuation, error) {
	var out types.Evacuation
	return out, c.doJSON(ctx, http.MethodPost, instancePath(name, "evacuate"), types.EvacuateRequest{Host: host}, &out)
}
