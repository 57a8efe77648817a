package client

import (
	"context"
	"net/http"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// Migrate moves the instance name to host (cold migration); it returns
// once the instance waits in verify on host.
func (c *Client) Migrate(ctx context.Context, name, host string) (types.Migration, error) {
	return c.MigrateWith(ctx, name, types.MigrateRequest{Host: host})
}

// MigrateWith is Migrate with the request's other fields.
func (c *Client) MigrateWith(ctx context.Context, name string, req types.MigrateRequest) (types.Migration, error) {
	var out types.Migration
	return out, c.doJSON(ctx, http.MethodPost, instancePath(name, "migrate"), req, &out)
}

// ConfirmMigration ends a move in verify: the source's copy goes.
func (c *Client) ConfirmMigration(ctx context.Context, name string) (types.Migration, error) {
	var out types.Migration
	return out, c.do(ctx, http.MethodPost, instancePath(name, "confirm-migration"), nil, &out)
}

// RevertMigration ends a move the other way: the instance is back on
// its source.
func (c *Client) RevertMigration(ctx context.Context, name string) (types.Migration, error) {
	var out types.Migration
	return out, c.do(ctx, http.MethodPost, instancePath(name, "revert-migration"), nil, &out)
}

// Migration is the move of the instance name (not found when none).
func (c *Client) Migration(ctx context.Context, name string) (types.Migration, error) {
	var out types.Migration
	return out, c.do(ctx, http.MethodGet, instancePath(name, "migration"), nil, &out)
}
