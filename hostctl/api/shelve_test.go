package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/parts/vmstate"
)

// shelveCtl is the shelve service, with shelve and rescue kept as a
// state per instance of the instance service (the real controller,
// without a hypervisor) and refused in the wrong state as the controller
// refuses them
// (controller.ErrState), so the routes, bodies and status codes are
// tested here; the operations themselves are tested against the real
// libvirtd and qemu-img in hostctl/controller (TestLibvirtShelveUnshelve,
// TestLibvirtRescue, TestShelveUnshelve, TestRescueUnrescue).
type shelveCtl struct {
	instances api.InstanceService
	mu        sync.Mutex
	state     map[string]string
	calls     []string
}

func (s *shelveCtl) move(ctx context.Context, name, op, from, to string) (*controller.Instance, error) {
	inst, err := s.instances.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.state[name]; cur != from {
		return nil, fmt.Errorf("%s %s: %w: the instance is %s", op, name, controller.ErrState, cur)
	}
	s.state[name] = to
	s.calls = append(s.calls, name+" "+op)
	inst.State = to
	return inst, nil
}

func (s *shelveCtl) Shelve(ctx context.Context, name string) (*controller.Instance, error) {
	return s.move(ctx, name, "shelve", "shutoff", vmstate.Shelved)
}

func (s *shelveCtl) Unshelve(ctx context.Context, name string) (*controller.Instance, error) {
	return s.move(ctx, name, "unshelve", vmstate.Shelved, "running")
}

func (s *shelveCtl) Rescue(ctx context.Context, name string, req types.RescueRequest) (*controller.Instance, error) {
	return s.move(ctx, name, "rescue "+req.Image, "running", vmstate.Rescue)
}

func (s *shelveCtl) Unrescue(ctx context.Context, name string) (*controller.Instance, error) {
	return s.move(ctx, name, "unrescue", vmstate.Rescue, "running")
}

// TestShelveRescueAPI: the four routes reach the controller with their
// bodies; an instance in the wrong state is a 409 naming it, an unknown
// instance or another project's a 404, a rescue without an image a 400.
func TestShelveRescueAPI(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	c, _ := newController(t)
	ctl := &shelveCtl{instances: c, state: map[string]string{"a-1": "shutoff"}}
	tt := newTestTokens(t)
	srv := newTestServer(t, api.NewHandler(api.Services{Instances: c, Shelve: ctl}, log, tt.auth))
	alice, bob := client.NewTCP(srv, tt.alice), client.NewTCP(srv, tt.bob)
	if _, err := alice.Apply(ctx, []byte("name: a-1\n")); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name   string
		do     func(c *client.Client) (*types.Instance, error)
		status int
		want   string
	}{
		{"unshelve a stopped instance", func(c *client.Client) (*types.Instance, error) { return c.Unshelve(ctx, "a-1") }, http.StatusConflict, "shutoff"},
		{"shelve", func(c *client.Client) (*types.Instance, error) { return c.Shelve(ctx, "a-1") }, http.StatusOK, vmstate.Shelved},
		{"shelve again", func(c *client.Client) (*types.Instance, error) { return c.Shelve(ctx, "a-1") }, http.StatusConflict, vmstate.Shelved},
		{"rescue a shelved instance", func(c *client.Client) (*types.Instance, error) {
			return c.Rescue(ctx, "a-1", types.RescueRequest{Image: "img"})
		}, http.StatusConflict, vmstate.Shelved},
		{"unshelve", func(c *client.Client) (*types.Instance, error) { return c.Unshelve(ctx, "a-1") }, http.StatusOK, "running"},
		{"rescue without an image", func(c *client.Client) (*types.Instance, error) { return c.Rescue(ctx, "a-1", types.RescueRequest{}) }, http.StatusBadRequest, "image"},
		{"rescue", func(c *client.Client) (*types.Instance, error) {
			return c.Rescue(ctx, "a-1", types.RescueRequest{Image: "img"})
		}, http.StatusOK, vmstate.Rescue},
		{"rescue again", func(c *client.Client) (*types.Instance, error) {
			return c.Rescue(ctx, "a-1", types.RescueRequest{Image: "img"})
		}, http.StatusConflict, vmstate.Rescue},
		{"unrescue", func(c *client.Client) (*types.Instance, error) { return c.Unrescue(ctx, "a-1") }, http.StatusOK, "running"},
		{"unrescue again", func(c *client.Client) (*types.Instance, error) { return c.Unrescue(ctx, "a-1") }, http.StatusConflict, "running"},
	}
	for _, s := range steps {
		// Another project's member learns nothing: 404, nothing done.
		if _, err := s.do(bob); status(err) != http.StatusNotFound {
			t.Errorf("%s by another project's member: %v, want 404", s.name, err)
		}
		inst, err := s.do(alice)
		switch {
		case s.status == http.StatusOK && (err != nil || inst.State != s.want):
			t.Errorf("%s: %+v, %v; want state %s", s.name, inst, err, s.want)
		case s.status != http.StatusOK && (status(err) != s.status || !strings.Contains(err.Error(), s.want)):
			t.Errorf("%s: %v, want %d naming %s", s.name, err, s.status, s.want)
		}
	}
	if got, want := strings.Join(ctl.calls, ", "), "a-1 shelve, a-1 unshelve, a-1 rescue img, a-1 unrescue"; got != want {
		t.Errorf("the controller got %s, want %s", got, want)
	}
	for _, op := range []func() error{
		func() error { _, err := alice.Shelve(ctx, "nope"); return err },
		func() error { _, err := alice.Unshelve(ctx, "nope"); return err },
		func() error { _, err := alice.Rescue(ctx, "nope", types.RescueRequest{Image: "img"}); return err },
		func() error { _, err := alice.Unrescue(ctx, "nope"); return err },
	} {
		if err := op(); status(err) != http.StatusNotFound {
			t.Errorf("unknown instance: %v, want 404", err)
		}
	}
}

// TestShelveRescueNoHypervisor: the real controller without a
// hypervisor refuses: shelve with 409 (no disk to keep), the others with
// 501; a rescue's bad image name is a 400 naming the field.
func TestShelveRescueNoHypervisor(t *testing.T) {
	ctx := context.Background()
	c := serve(t)
	if _, err := c.Apply(ctx, []byte("name: a\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Shelve(ctx, "a"); status(err) != http.StatusConflict || !strings.Contains(err.Error(), "without a hypervisor") {
		t.Errorf("shelve: %v", err)
	}
	for name, op := range map[string]func() error{
		"unshelve": func() error { _, err := c.Unshelve(ctx, "a"); return err },
		"rescue":   func() error { _, err := c.Rescue(ctx, "a", types.RescueRequest{Image: "img"}); return err },
		"unrescue": func() error { _, err := c.Unrescue(ctx, "a"); return err },
	} {
		if err := op(); status(err) != http.StatusNotImplemented {
			t.Errorf("%s: %v, want 501", name, err)
		}
	}
	if _, err := c.Rescue(ctx, "a", types.RescueRequest{Image: "../x"}); status(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "image") {
		t.Errorf("rescue with a bad image name: %v", err)
	}
}
