package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// CreateShare adds a share to the registry.
func (c *Client) CreateShare(ctx context.Context, req types.ShareCreateRequest) (types.Share, error) {
	var out types.ShareBody
	return out.Share, c.doJSON(ctx, http.MethodPost, "/v1/shares", req, &out)
}

// Shares lists the registry.
func (c *Client) Shares(ctx context.Context) ([]types.Share, error) {
	var out types.SharesBody
	return out.Shares, c.do(ctx, http.MethodGet, "/v1/shares", nil, &out)
}

// Share shows one share.
func (c *Client) Share(ctx context.Context, id string) (types.Share, error) {
	var out types.ShareBody
	return out.Share, c.do(ctx, http.MethodGet, "/v1/shares/"+url.PathEscape(id), nil, &out)
}

// DeleteShare removes a share from the registry.
func (c *Client) DeleteShare(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/shares/"+url.PathEscape(id), nil, nil)
}

// ServerShares lists the shares attached to a server (UUID or name).
func (c *Client) ServerShares(ctx context.Context, server string) ([]types.ShareMapping, error) {
	var out types.ServerSharesBody
	return out.Shares, c.do(ctx, http.MethodGet, serverSharesPath(server, ""), nil, &out)
}

// ServerShare shows one share attached to a server.
func (c *Client) ServerShare(ctx context.Context, server, shareID string) (types.ShareMapping, error) {
	var out types.ServerShareBody
	return out.Share, c.do(ctx, http.MethodGet, serverSharesPath(server, shareID), nil, &out)
}

// AttachShare attaches a share to a server.
func (c *Client) AttachShare(ctx context.Context, server string, req types.ServerShareAttach) (types.ShareMapping, error) {
	var out types.ServerShareBody
	p := serverSharesPath(server, "")
	if req.Live {
		p += "?live=true"
	}
	return out.Share, c.doJSON(ctx, http.MethodPost, p, types.ServerShareRequest{Share: req}, &out)
}

// DetachShare detaches a share from a server (live: from a running one).
func (c *Client) DetachShare(ctx context.Context, server, shareID string, live bool) (types.ShareMapping, error) {
	var out types.ServerShareBody
	p := serverSharesPath(server, shareID)
	if live {
		p += "?live=true"
	}
	return out.Share, c.do(ctx, http.MethodDelete, p, nil, &out)
}

func serverSharesPath(server, shareID string) string {
	p := "/v1/servers/" + url.PathEscape(server) + "/shares"
	if shareID != "" {
		p += "/" + url.PathEscape(shareID)
	}
	return p
}

// CephAuth gives the host its CephX admin keyring (administrators).
func (c *Client) CephAuth(ctx context.Context, req types.CephAuthRequest) (types.CephAuthResult, error) {
	var out types.CephAuthResult
	return out, c.doJSON(ctx, http.MethodPost, "/v1/shares/ceph-auth", req, &out)
}
