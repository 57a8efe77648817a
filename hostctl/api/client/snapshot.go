package client

import (
	"context"
	"net/http"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// Snapshot copies a stopped instance's root disk into a new image of the
// catalog, encrypted as req.EncryptionKey says.
func (c *Client) Snapshot(ctx context.Context, name string, req types.SnapshotRequest) (types.Image, error) {
	var out types.Image
	return out, c.doJSON(ctx, http.MethodPost, instancePath(name, "snapshot"), req, &out)
}
