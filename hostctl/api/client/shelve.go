package client

import (
	"context"
	"net/http"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// Shelve shelves a stopped instance: its root disk into the image
// catalog, its domain and disk files released.
func (c *Client) Shelve(ctx context.Context, name string) (*types.Instance, error) {
	var out types.Instance
	return &out, c.do(ctx, http.MethodPost, instancePath(name, "shelve"), nil, &out)
}

// Unshelve makes a shelved instance's disks and domain again and starts
// it.
func (c *Client) Unshelve(ctx context.Context, name string) (*types.Instance, error) {
	var out types.Instance
	return &out, c.do(ctx, http.MethodPost, instancePath(name, "unshelve"), nil, &out)
}

// Rescue boots the instance from a rescue disk made from req.Image, its
// root disk attached as the second disk.
func (c *Client) Rescue(ctx context.Context, name string, req types.RescueRequest) (*types.Instance, error) {
	var out types.Instance
	return &out, c.doJSON(ctx, http.MethodPost, instancePath(name, "rescue"), req, &out)
}

// Unrescue ends a rescue: the original domain back, started.
func (c *Client) Unrescue(ctx context.Context, name string) (*types.Instance, error) {
	var out types.Instance
	return &out, c.do(ctx, http.MethodPost, instancePath(name, "unrescue"), nil, &out)
}
