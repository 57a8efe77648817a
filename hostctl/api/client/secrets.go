package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// CreateSecret creates a key-manager secret; its value is never returned.
func (c *Client) CreateSecret(ctx context.Context, req types.SecretRequest) (*types.Secret, error) {
	var out types.Secret
	return &out, c.doJSON(ctx, http.MethodPost, "/v1/secrets", req, &out)
}

// Secrets lists secrets (of project, when not empty).
func (c *Client) Secrets(ctx context.Context, project string) ([]types.Secret, error) {
	var out []types.Secret
	path := "/v1/secrets"
	if project != "" {
		path += "?project=" + url.QueryEscape(project)
	}
	return out, c.do(ctx, http.MethodGet, path, nil, &out)
}

// Secret returns one secret's metadata.
func (c *Client) Secret(ctx context.Context, uuid string) (*types.Secret, error) {
	var out types.Secret
	return &out, c.do(ctx, http.MethodGet, "/v1/secrets/"+url.PathEscape(uuid), nil, &out)
}

// DeleteSecret deletes a secret.
func (c *Client) DeleteSecret(ctx context.Context, uuid string) error {
	return c.do(ctx, http.MethodDelete, "/v1/secrets/"+url.PathEscape(uuid), nil, nil)
}
