package api_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
)

// tcpAPI serves the admin API with token auth over real HTTP and returns a
// client per role: an admin, a member of project a, a member of project b.
func tcpAPI(t *testing.T) (admin, memberA, memberB *client.Client, base string) {
	t.Helper()
	ctl, _ := newController(t)
	log := slog.New(slog.DiscardHandler)
	tt := newTestTokens(t)
	srv := httptest.NewServer(api.NewHandler(ctlServices(ctl), log, tt.auth))
	t.Cleanup(srv.Close)
	return client.NewTCP(srv.URL, tt.root), client.NewTCP(srv.URL, tt.alice), client.NewTCP(srv.URL, tt.bob), srv.URL
}

func status(err error) int {
	var ae *types.Error
	if errors.As(err, &ae) {
		return ae.StatusCode()
	}
	return 0
}

func TestRolesAndProjects(t *testing.T) {
	ctx := context.Background()
	admin, alice, bob, base := tcpAPI(t)

	// A member's instance lands in its project when the spec names none.
	inst, err := alice.Apply(ctx, []byte("name: a-1\naddresses: [10.9.0.1]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if inst.Spec.ProjectID != "a" {
		t.Fatalf("project = %q, want a", inst.Spec.ProjectID)
	}
	if _, err := bob.Apply(ctx, []byte("name: b-1\nproject_id: b\naddresses: [10.9.0.2]\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Apply(ctx, []byte("name: ops-1\nproject_id: ops\n")); err != nil {
		t.Fatal(err)
	}

	names := func(c *client.Client) string {
		list, err := c.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ns []string
		for _, in := range list {
			ns = append(ns, in.Spec.Name)
		}
		return strings.Join(ns, ",")
	}
	if got := names(admin); got != "a-1,b-1,ops-1" {
		t.Errorf("admin sees %q", got)
	}
	if got := names(alice); got != "a-1" {
		t.Errorf("alice sees %q", got)
	}
	if got := names(bob); got != "b-1" {
		t.Errorf("bob sees %q", got)
	}

	refused := []struct {
		name   string
		call   func() error
		status int
	}{
		{"member reads another project's instance", func() error { _, err := alice.Get(ctx, "b-1"); return err }, 404},
		{"member deletes another project's instance", func() error { return alice.Delete(ctx, "b-1") }, 404},
		{"member fetches another project's drive", func() error { _, err := alice.ConfigDrive(ctx, "b-1", "iso9660"); return err }, 404},
		{"member applies into another project", func() error {
			_, err := alice.Apply(ctx, []byte("name: x\nproject_id: b\n"))
			return err
		}, 403},
		{"member overwrites another project's name", func() error {
			_, err := alice.Apply(ctx, []byte("name: b-1\n"))
			return err
		}, 409},
		{"no token", func() error { _, err := client.NewTCP(base, "").List(ctx); return err }, 401},
		{"unknown token", func() error { _, err := client.NewTCP(base, "vmeta_nope").List(ctx); return err }, 401},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			if got := status(tt.call()); got != tt.status {
				t.Fatalf("status %d, want %d", got, tt.status)
			}
		})
	}
	// Nothing the refused calls touched changed.
	if got := names(admin); got != "a-1,b-1,ops-1" {
		t.Errorf("after refused calls admin sees %q", got)
	}
	b1, err := admin.Get(ctx, "b-1")
	if err != nil || b1.Revision != 1 || b1.Spec.ProjectID != "b" {
		t.Errorf("b-1 changed: %+v %v", b1, err)
	}
	who, err := bob.WhoAmI(ctx)
	if err != nil || who.Name != "bob" || who.Role != types.RoleMember || who.Project != "b" {
		t.Errorf("whoami = %+v, %v", who, err)
	}
}
