package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

func keysPath(class, action, instance string) string {
	p := "/v1/keys/" + url.PathEscape(class) + "/" + action
	if instance != "" {
		p += "?instance=" + url.QueryEscape(instance)
	}
	return p
}

// Keys returns every key rotation subject's policy and status (of class,
// when not empty).
func (c *Client) Keys(ctx context.Context, class string) ([]types.KeyReport, error) {
	var out []types.KeyReport
	path := "/v1/keys"
	if class != "" {
		path += "?class=" + url.QueryEscape(class)
	}
	return out, c.do(ctx, http.MethodGet, path, nil, &out)
}

// SetKeyPolicy sets the rotation policy of a class (of an instance's
// disks, when instance is not empty).
func (c *Client) SetKeyPolicy(ctx context.Context, class, instance string, p types.KeyPolicy) (types.KeyPolicy, error) {
	var out types.KeyPolicy
	return out, c.doJSON(ctx, http.MethodPut, keysPath(class, "policy", instance), p, &out)
}

// RotateKeys asks for one more rotation; it returns the new policy and
// how many subjects it rotates (0: nothing to rotate).
func (c *Client) RotateKeys(ctx context.Context, class, instance string) (types.KeyRotation, error) {
	var out types.KeyRotation
	return out, c.doJSON(ctx, http.MethodPost, keysPath(class, "rotate", instance), struct{}{}, &out)
}

// PruneKeys drops an overlapping class's prior keys beyond keep.
func (c *Client) PruneKeys(ctx context.Context, class string, keep int) (types.KeyStatus, error) {
	var out types.KeyStatus
	return out, c.doJSON(ctx, http.MethodPost, keysPath(class, "prune", ""), types.KeyPruneRequest{Keep: keep}, &out)
}

// RevealProxySecret returns the current proxy secret.
func (c *Client) RevealProxySecret(ctx context.Context) (types.KeyReveal, error) {
	var out types.KeyReveal
	return out, c.do(ctx, http.MethodGet, keysPath("proxy-secret", "reveal", ""), nil, &out)
}
