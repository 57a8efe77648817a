package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
)

// recordingCtl is the power and hotplug services, recording the libvirt
// requests the API passes on and answering with the instance of the
// instance service (the real controller, without a hypervisor).
type recordingCtl struct {
	instances api.InstanceService
	mu        sync.Mutex
	calls     []string
}

func (r *recordingCtl) rec(ctx context.Context, name, call string) (*controller.Instance, error) {
	r.mu.Lock()
	r.calls = append(r.calls, name+" "+call)
	r.mu.Unlock()
	return r.instances.Get(ctx, name)
}

func (r *recordingCtl) Reboot(ctx context.Context, name string, hard bool) (*controller.Instance, error) {
	return r.rec(ctx, name, fmt.Sprintf("reboot hard=%v", hard))
}

func (r *recordingCtl) Start(ctx context.Context, name string) (*controller.Instance, error) {
	return r.rec(ctx, name, "start")
}

func (r *recordingCtl) Stop(ctx context.Context, name string, timeout time.Duration) (*controller.Instance, error) {
	return r.rec(ctx, name, "stop "+timeout.String())
}

func (r *recordingCtl) AttachDisk(ctx context.Context, name string, req types.DiskRequest) (*controller.Instance, error) {
	return r.rec(ctx, name, "attach-disk "+js(req))
}

func (r *recordingCtl) DetachDisk(ctx context.Context, name string, req types.DetachRequest) (*controller.Instance, error) {
	return r.rec(ctx, name, "detach-disk "+js(req))
}

func (r *recordingCtl) AttachNIC(ctx context.Context, name string, req types.NICRequest) (*controller.Instance, error) {
	return r.rec(ctx, name, "attach-nic "+js(req))
}

func (r *recordingCtl) DetachNIC(ctx context.Context, name string, req types.DetachRequest) (*controller.Instance, error) {
	return r.rec(ctx, name, "detach-nic "+js(req))
}

func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func newTestServer(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestDeviceEndpoints: the power and device requests reach the controller
// as the client sent them, and a member reaches only its own project's
// instances (another project's does not exist: 404, nothing called).
func TestDeviceEndpoints(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	c, _ := newController(t)
	ctl := &recordingCtl{instances: c}
	tt := newTestTokens(t)
	srv := newTestServer(t, api.NewHandler(api.Services{Instances: c, Power: ctl, Reboot: ctl, Hotplug: ctl}, log, tt.auth))
	alice, bob := client.NewTCP(srv, tt.alice), client.NewTCP(srv, tt.bob)
	if _, err := alice.Apply(ctx, []byte("name: a-1\n")); err != nil {
		t.Fatal(err)
	}

	ops := []struct {
		call string
		do   func(c *client.Client) error
	}{
		{"a-1 start", func(c *client.Client) error { _, err := c.Start(ctx, "a-1"); return err }},
		{"a-1 stop 2.5s", func(c *client.Client) error { _, err := c.Stop(ctx, "a-1", 2500*time.Millisecond); return err }},
		{`a-1 attach-disk {"tag":"data","bus":"scsi","size":"2G","serial":"s1","live":true}`, func(c *client.Client) error {
			_, err := c.AttachDisk(ctx, "a-1", types.DiskRequest{Tag: "data", Bus: "scsi", Size: "2G", Serial: "s1", Affect: types.Affect{Live: true}})
			return err
		}},
		{`a-1 detach-disk {"tag":"data w/ space","config":true}`, func(c *client.Client) error {
			_, err := c.DetachDisk(ctx, "a-1", types.DetachRequest{Tag: "data w/ space", Affect: types.Affect{Config: true}})
			return err
		}},
		{`a-1 attach-nic {"tag":"front","mac":"52:54:00:00:00:01","network":"n1"}`, func(c *client.Client) error {
			_, err := c.AttachNIC(ctx, "a-1", types.NICRequest{Tag: "front", MAC: "52:54:00:00:00:01", Network: "n1"})
			return err
		}},
		{`a-1 detach-nic {"mac":"52:54:00:00:00:01","live":true,"config":true}`, func(c *client.Client) error {
			_, err := c.DetachNIC(ctx, "a-1", types.DetachRequest{MAC: "52:54:00:00:00:01", Affect: types.Affect{Live: true, Config: true}})
			return err
		}},
	}
	for _, op := range ops {
		if err := op.do(bob); status(err) != http.StatusNotFound {
			t.Errorf("%s by another project's member: %v (status %d), want 404", op.call, err, status(err))
		}
		if err := op.do(alice); err != nil {
			t.Errorf("%s: %v", op.call, err)
		}
	}
	var want []string
	for _, op := range ops {
		want = append(want, op.call)
	}
	if got := strings.Join(ctl.calls, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("the controller got:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}

	// Bodies with unknown fields are refused.
	if got, _ := do(t, http.MethodPost, srv+"/v1/instances/a-1/disks", tt.alice, `{"tag":"x","colour":"red"}`); got != http.StatusBadRequest {
		t.Errorf("unknown field: %d, want 400", got)
	}
}

// TestNoHypervisorStatus: a libvirt request to a daemon without libvirt
// is 501, with the reason.
func TestNoHypervisorStatus(t *testing.T) {
	ctx := context.Background()
	c := serve(t)
	if _, err := c.Apply(ctx, []byte("name: a\n")); err != nil {
		t.Fatal(err)
	}
	_, err := c.Start(ctx, "a")
	if status(err) != http.StatusNotImplemented || !strings.Contains(err.Error(), "--virt none") {
		t.Errorf("start without a hypervisor: %v (status %d)", err, status(err))
	}
	if _, err := c.AttachDisk(ctx, "nope", types.DiskRequest{Tag: "x"}); status(err) != http.StatusNotFound {
		t.Errorf("attach to a missing instance: %v", err)
	}
}
