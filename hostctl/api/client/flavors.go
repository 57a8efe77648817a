package client

import (
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"

	"github.com/vmeta/vmeta/hostctl/api/types"
)

// CreateFlavor adds a flavor.
func (c *Client) CreateFlavor(ctx context.Context, f types.Flavor) (types.Flavor, error) {
	var out types.Flavor
	return out, c.doJSON(ctx, http.MethodPost, "/v1/flavors", f, &out)
}

// Flavor returns a flavor.
func (c *Client) Flavor(ctx context.Context, name string) (types.Flavor, error) {
	var out types.Flavor
	return out, c.do(ctx, http.MethodGet, "/v1/flavors/"+url.PathEscape(name), nil, &out)
}

// Flavors lists the flavors.
func (c *Client) Flavors(ctx context.Context) ([]types.Flavor, error) {
	var out []types.Flavor
	return out, c.do(ctx, http.MethodGet, "/v1/flavors", nil, &out)
}

// DeleteFlavor deletes a flavor.
func (c *Client) DeleteFlavor(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/flavors/"+url.PathEscape(name), nil, nil)
}

// ImportImage streams an image (r) to the daemon's image directory as
// name, with its properties.
func (c *Client) ImportImage(ctx context.Context, name string, props map[string]string, r io.Reader) (types.Image, error) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := func() error {
			// The "image" part is JSON, and says so (openapi.yaml's
			// encoding); CreateFormField would send it as text/plain.
			part, err := mw.CreatePart(textproto.MIMEHeader{
				"Content-Disposition": {`form-data; name="image"`},
				"Content-Type":        {"application/json"},
			})
			if err != nil {
				return err
			}
			if err := json.NewEncoder(part).Encode(types.ImageImport{Name: name, Properties: props}); err != nil {
				return err
			}
			file, err := mw.CreateFormFile("file", name)
			if err != nil {
				return err
			}
			if _, err := io.Copy(file, r); err != nil {
				return err
			}
			return mw.Close()
		}()
		pw.CloseWithError(err)
	}()
	var out types.Image
	err := c.doType(ctx, http.MethodPost, "/v1/images", mw.FormDataContentType(), pr, &out)
	pr.Close()
	return out, err
}

// Image returns an image of the daemon's image directory.
func (c *Client) Image(ctx context.Context, name string) (types.Image, error) {
	var out types.Image
	return out, c.do(ctx, http.MethodGet, "/v1/images/"+url.PathEscape(name), nil, &out)
}

// Images lists the daemon's image directory.
func (c *Client) Images(ctx context.Context) ([]types.Image, error) {
	var out []types.Image
	return out, c.do(ctx, http.MethodGet, "/v1/images", nil, &out)
}

// DeleteImage deletes an image.
func (c *Client) DeleteImage(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/images/"+url.PathEscape(name), nil, nil)
}

// Resize gives a stopped instance another flavor.
func (c *Client) Resize(ctx context.Context, name, flavor string) (*types.Instance, error) {
	var out types.Instance
	return &out, c.doJSON(ctx, http.MethodPost, instancePath(name, "resize"), types.ResizeRequest{Flavor: flavor}, &out)
}

// Rebuild makes a stopped instance's root disk anew from an image.
func (c *Client) Rebuild(ctx context.Context, name, image string) (*types.Instance, error) {
	var out types.Instance
	return &out, c.doJSON(ctx, http.MethodPost, instancePath(name, "rebuild"), types.RebuildRequest{Image: image}, &out)
}
