package api_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/catalog"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/internal/keys"
)

// TestSnapshotMember (issue 20, item 4): with member tokens over TCP, a
// project member snapshots its own instance with every encryption_key
// choice (the requests pass the API's authorization and reach the
// controller, which refuses only because no hypervisor made a disk),
// with encryption_key existing naming its own project's secret; a secret
// of another project, or none, is a 403 to a member; the administrator
// may name any project's secret.
func TestSnapshotMember(t *testing.T) {
	ctx := context.Background()
	k := newKeyedController(t, "local", controller.Options{}, nil)
	ctl, km := k.ctl, k.km
	tt := newTestTokens(t)
	srv := httptest.NewServer(api.NewHandler(ctlServicesWith(ctl, catalog.Options{Keys: km}), slog.New(slog.DiscardHandler), tt.auth))
	t.Cleanup(srv.Close)
	admin, alice := client.NewTCP(srv.URL, tt.root), client.NewTCP(srv.URL, tt.alice)

	if _, err := alice.Apply(ctx, []byte("name: a1\n")); err != nil {
		t.Fatal(err)
	}
	own, err := alice.CreateSecret(ctx, types.SecretRequest{Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := admin.CreateSecret(ctx, types.SecretRequest{Name: "theirs", ProjectID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	authorized := func(err error) bool {
		return status(err) == http.StatusConflict && strings.Contains(err.Error(), "without a hypervisor")
	}
	for _, req := range []types.SnapshotRequest{
		{Image: "s1"},
		{Image: "s1", EncryptionKey: "same"},
		{Image: "s1", EncryptionKey: "new"},
		{Image: "s1", EncryptionKey: "none"},
		{Image: "s1", EncryptionKey: "existing", SecretUUID: own.UUID},
	} {
		if _, err := alice.Snapshot(ctx, "a1", req); !authorized(err) {
			t.Errorf("member snapshot %+v = %v, want it authorized (then 409: no hypervisor)", req, err)
		}
	}
	for _, id := range []string{other.UUID, keys.NewUUID()} {
		_, err := alice.Snapshot(ctx, "a1", types.SnapshotRequest{Image: "s1", EncryptionKey: "existing", SecretUUID: id})
		if status(err) != http.StatusForbidden || !strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), "administrator") {
			t.Errorf("member snapshot with secret %s of another project (or none) = %v, want 403 naming it", id, err)
		}
	}
	if _, err := admin.Snapshot(ctx, "a1", types.SnapshotRequest{Image: "s1", EncryptionKey: "existing", SecretUUID: other.UUID}); !authorized(err) {
		t.Errorf("administrator snapshot with another project's secret = %v, want it authorized", err)
	}
}
