// Package client is a Go client of hostctl's admin API, used by the
// hostctl client commands, tests and other tools. It speaks only the wire
// types of hostctl/api/types, so it links neither the controller nor
// libvirt (deps_test.go keeps it that way).
//
// A refusal is a *types.Error (errors.As) marked with the kind of error
// its status stands for, so that a caller asks errors.Is(err,
// errkind.NotFound) on this side of the wire as on the daemon's.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/errkind"
)

// SocketEnv, when set, names the admin socket of both the daemon and its
// clients.
const SocketEnv = "VMETA_SOCKET"

// DefaultSocket is the admin socket path: $VMETA_SOCKET, or
// /run/vmeta/hostctl.sock.
func DefaultSocket() string {
	if s := os.Getenv(SocketEnv); s != "" {
		return s
	}
	return "/run/vmeta/hostctl.sock"
}

// Client talks to a hostctl daemon's admin API.
type Client struct {
	http  *http.Client
	base  string
	token string
}

// NewTCP returns a client for the admin API's TCP listener at base
// (e.g. "http://10.0.0.2:8700"), authenticating with a bearer token.
func NewTCP(base, token string) *Client {
	return &Client{http: &http.Client{}, base: strings.TrimRight(base, "/"), token: token}
}

// NewUnix returns a client for the admin API on a unix socket.
func NewUnix(socket string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}
	return &Client{http: &http.Client{Transport: tr}, base: "http://hostctl"}
}

// Apply sends a spec (YAML or JSON) and returns the published instance.
func (c *Client) Apply(ctx context.Context, spec []byte) (*types.Instance, error) {
	var out types.Instance
	return &out, c.do(ctx, http.MethodPost, "/v1/instances", bytes.NewReader(spec), &out)
}

// Get returns one instance.
func (c *Client) Get(ctx context.Context, name string) (*types.Instance, error) {
	var out types.Instance
	return &out, c.do(ctx, http.MethodGet, "/v1/instances/"+url.PathEscape(name), nil, &out)
}

// List returns every instance.
func (c *Client) List(ctx context.Context) ([]*types.Instance, error) {
	var out []*types.Instance
	return out, c.do(ctx, http.MethodGet, "/v1/instances", nil, &out)
}

// ListAll returns every host's instances.
func (c *Client) ListAll(ctx context.Context) ([]*types.Instance, error) {
	var out []*types.Instance
	return out, c.do(ctx, http.MethodGet, "/v1/instances?all_hosts=1", nil, &out)
}

// Hosts returns the hosts sharing the store.
func (c *Client) Hosts(ctx context.Context) ([]types.HostStatus, error) {
	var out []types.HostStatus
	return out, c.do(ctx, http.MethodGet, "/v1/hosts", nil, &out)
}

// Adopt makes the answering host the owner of a dead host's instance.
func (c *Client) Adopt(ctx context.Context, name string) (*types.Instance, error) {
	var out types.Instance
	return &out, c.do(ctx, http.MethodPost, instancePath(name, "adopt"), nil, &out)
}

// ForceDeleteFromStore removes the record of a dead host's instance and
// returns what that host still holds.
func (c *Client) ForceDeleteFromStore(ctx context.Context, name string) ([]string, error) {
	var out types.ForceDeleteResult
	return out.Left, c.do(ctx, http.MethodDelete, "/v1/instances/"+url.PathEscape(name)+"?force_from_store=1", nil, &out)
}

// Delete removes an instance.
func (c *Client) Delete(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/instances/"+url.PathEscape(name), nil, nil)
}

// Start boots an instance's domain.
func (c *Client) Start(ctx context.Context, name string) (*types.Instance, error) {
	var out types.Instance
	return &out, c.do(ctx, http.MethodPost, instancePath(name, "start"), nil, &out)
}

// Stop shuts an instance's domain down, powering it off after timeout
// (the daemon's default when 0).
func (c *Client) Stop(ctx context.Context, name string, timeout time.Duration) (*types.Instance, error) {
	var out types.Instance
	return &out, c.doJSON(ctx, http.MethodPost, instancePath(name, "stop"), types.StopRequest{TimeoutSeconds: timeout.Seconds()}, &out)
}

// Reboot reboots an instance: hard (power off, start again: the way out
// of ERROR) or soft (libvirt's reboot of a running instance).
func (c *Client) Reboot(ctx context.Context, name string, hard bool) (*types.Instance, error) {
	req := types.RebootRequest{Type: types.RebootSoft}
	if hard {
		req.Type = types.RebootHard
	}
	var out types.Instance
	return &out, c.doJSON(ctx, http.MethodPost, instancePath(name, "reboot"), req, &out)
}

// AttachDisk creates and attaches a disk.
func (c *Client) AttachDisk(ctx context.Context, name string, req types.DiskRequest) (*types.Instance, error) {
	var out types.Instance
	return &out, c.doJSON(ctx, http.MethodPost, instancePath(name, "disks"), req, &out)
}

// DetachDisk detaches a disk by tag or target.
func (c *Client) DetachDisk(ctx context.Context, name string, req types.DetachRequest) (*types.Instance, error) {
	var out types.Instance
	return &out, c.do(ctx, http.MethodDelete, instancePath(name, "disks")+detachQuery(req), nil, &out)
}

// AttachNIC attaches a NIC.
func (c *Client) AttachNIC(ctx context.Context, name string, req types.NICRequest) (*types.Instance, error) {
	var out types.Instance
	return &out, c.doJSON(ctx, http.MethodPost, instancePath(name, "nics"), req, &out)
}

// DetachNIC detaches a NIC by tag or MAC.
func (c *Client) DetachNIC(ctx context.Context, name string, req types.DetachRequest) (*types.Instance, error) {
	var out types.Instance
	return &out, c.do(ctx, http.MethodDelete, instancePath(name, "nics")+detachQuery(req), nil, &out)
}

func instancePath(name, sub string) string {
	return "/v1/instances/" + url.PathEscape(name) + "/" + sub
}

func detachQuery(req types.DetachRequest) string {
	q := url.Values{}
	for k, v := range map[string]string{"tag": req.Tag, "target": req.Target, "mac": req.MAC} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if req.Live {
		q.Set("live", "true")
	}
	if req.Config {
		q.Set("config", "true")
	}
	return "?" + q.Encode()
}

func (c *Client) doJSON(ctx context.Context, method, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return c.do(ctx, method, path, bytes.NewReader(b), out)
}

// WhoAmI returns the principal the daemon sees for this client.
func (c *Client) WhoAmI(ctx context.Context) (types.Principal, error) {
	var out types.Principal
	return out, c.do(ctx, http.MethodGet, "/v1/whoami", nil, &out)
}

// ConfigDrive returns a config drive image of an instance.
func (c *Client) ConfigDrive(ctx context.Context, name, format string) ([]byte, error) {
	var out []byte
	p := "/v1/instances/" + url.PathEscape(name) + "/configdrive?format=" + url.QueryEscape(format)
	return out, c.do(ctx, http.MethodGet, p, nil, &out)
}

func (c *Client) do(ctx context.Context, method, path string, body io.Reader, out any) error {
	return c.doType(ctx, method, path, "", body, out)
}

// doType is do with the body's Content-Type (none when empty).
func (c *Client) doType(ctx context.Context, method, path, contentType string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("hostctl daemon: %w (is `hostctl serve` running?)", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("hostctl daemon: read response: %w", err)
	}
	if resp.StatusCode >= 300 {
		// The body is a types.Error; its status travels with it, and
		// the kind the status stands for marks it (errors.Is(err,
		// errkind.NotFound)).
		e := &types.Error{Status: resp.StatusCode}
		if json.Unmarshal(b, e) != nil || e.Message == "" {
			e.Message = fmt.Sprintf("%s %s: %s", method, path, resp.Status)
		}
		if k, ok := statusKind[resp.StatusCode]; ok {
			return errkind.Mark(e, k)
		}
		return e
	}
	switch o := out.(type) {
	case nil:
		return nil
	case *[]byte:
		*o = b
		return nil
	default:
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("hostctl daemon: decode response: %w", err)
		}
		return nil
	}
}

// Devices lists the device inventory (GET /v1/devices).
func (c *Client) Devices(ctx context.Context, needsCleaning bool, trait string, allHosts bool) ([]types.Device, error) {
	q := url.Values{}
	if needsCleaning {
		q.Set("needs_cleaning", "true")
	}
	if trait != "" {
		q.Set("trait", trait)
	}
	if allHosts {
		q.Set("all_hosts", "true")
	}
	path := "/v1/devices"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out types.DeviceList
	return out.Devices, c.do(ctx, http.MethodGet, path, nil, &out)
}

// Device returns one device of the answering host's inventory.
func (c *Client) Device(ctx context.Context, addr string) (types.Device, error) {
	var out types.Device
	return out, c.do(ctx, http.MethodGet, "/v1/devices/"+url.PathEscape(addr), nil, &out)
}

// CleanDevice tells the answering host that a device is clean: reserved
// goes back to 0 and it rejoins the pool.
func (c *Client) CleanDevice(ctx context.Context, addr string) (types.Device, error) {
	var out types.Device
	return out, c.do(ctx, http.MethodPost, "/v1/devices/"+url.PathEscape(addr)+"/clean", nil, &out)
}
