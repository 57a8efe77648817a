package api_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/errkind"
)

// fakeMoves answers the move routes: a move to "b" goes to verify,
// confirm and revert end it; another host is unknown.
type fakeMoves struct{ state string }

func (f *fakeMoves) Migrate(_ context.Context, name string, req types.MigrateRequest) (types.Migration, error) {
	host := req.Host
	switch {
	case host != "b":
		return types.Migration{}, errkind.Errorf(errkind.Invalid, "host %q: no such host in the store", host)
	case f.state != "":
		return types.Migration{}, errkind.Errorf(errkind.Conflict, "its move is in %s", f.state)
	}
	f.state = "verify"
	return types.Migration{Instance: name, Source: "a", Dest: host, State: f.state}, nil
}

func (f *fakeMoves) end(name string) (types.Migration, error) {
	if f.state != "verify" {
		return types.Migration{}, errkind.Errorf(errkind.NotFound, "no move of %s", name)
	}
	f.state = ""
	return types.Migration{Instance: name}, nil
}

func (f *fakeMoves) ConfirmMigration(_ context.Context, name string) (types.Migration, error) {
	return f.end(name)
}

func (f *fakeMoves) RevertMigration(_ context.Context, name string) (types.Migration, error) {
	return f.end(name)
}

func (f *fakeMoves) Migration(_ context.Context, name string) (types.Migration, error) {
	if f.state == "" {
		return types.Migration{}, errkind.Errorf(errkind.NotFound, "no move of %s", name)
	}
	return types.Migration{Instance: name, State: f.state}, nil
}

// TestMigrationAPI: the move routes are an administrator's, a bad host
// is a 400, a second move a 409, confirm without a move a 404; a daemon
// without moves answers 501.
func TestMigrationAPI(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	c, _ := newController(t)
	tt := newTestTokens(t)
	srv := newTestServer(t, api.NewHandler(api.Services{Instances: c, Migrations: &fakeMoves{}}, log, tt.auth))
	root, alice := client.NewTCP(srv, tt.root), client.NewTCP(srv, tt.alice)
	if _, err := alice.Apply(ctx, []byte("name: a-1\n")); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name   string
		do     func() (types.Migration, error)
		status int
		want   string
	}{
		{"a member may not move", func() (types.Migration, error) { return alice.Migrate(ctx, "a-1", "b") }, http.StatusForbidden, "administrator"},
		{"no host", func() (types.Migration, error) { return root.Migrate(ctx, "a-1", "") }, http.StatusBadRequest, "host: required"},
		{"an unknown host", func() (types.Migration, error) { return root.Migrate(ctx, "a-1", "c") }, http.StatusBadRequest, "no such host"},
		{"a negative timeout", func() (types.Migration, error) {
			return root.MigrateWith(ctx, "a-1", types.MigrateRequest{Host: "b", TimeoutSeconds: -1})
		}, http.StatusBadRequest, "timeout_seconds"},
		{"confirm without a move", func() (types.Migration, error) { return root.ConfirmMigration(ctx, "a-1") }, http.StatusNotFound, "no move"},
		{"migrate", func() (types.Migration, error) { return root.Migrate(ctx, "a-1", "b") }, http.StatusOK, "verify"},
		{"show", func() (types.Migration, error) { return root.Migration(ctx, "a-1") }, http.StatusOK, "verify"},
		{"a second move", func() (types.Migration, error) { return root.Migrate(ctx, "a-1", "b") }, http.StatusConflict, "verify"},
		{"a member may not revert", func() (types.Migration, error) { return alice.RevertMigration(ctx, "a-1") }, http.StatusForbidden, "administrator"},
		{"revert", func() (types.Migration, error) { return root.RevertMigration(ctx, "a-1") }, http.StatusOK, ""},
		{"show after", func() (types.Migration, error) { return root.Migration(ctx, "a-1") }, http.StatusNotFound, "no move"},
	}
	for _, s := range steps {
		m, err := s.do()
		switch {
		case s.status == http.StatusOK && (err != nil || m.State != s.want):
			t.Errorf("%s: %+v, %v; want state %q", s.name, m, err, s.want)
		case s.status != http.StatusOK && (status(err) != s.status || !strings.Contains(err.Error(), s.want)):
			t.Errorf("%s: %v; want %d naming %q", s.name, err, s.status, s.want)
		}
	}

	srv2 := newTestServer(t, api.NewHandler(api.Services{Instances: c}, log, tt.auth))
	if _, err := client.NewTCP(srv2, tt.root).Migrate(ctx, "a-1", "b"); status(err) != http.StatusNotImplemented {
		t.Errorf("migrate on a daemon without moves: %v, want 501", err)
	}
}
