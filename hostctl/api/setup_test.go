package api_test

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/auth"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/catalog"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/internal/store/bolt"
)

// newController returns a controller without a hypervisor over an
// embedded store in a temporary data directory, and that directory.
func newController(t *testing.T) (*controller.Controller, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := bolt.Open(filepath.Join(dir, "vmeta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return controller.New(st, controller.Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler)}), dir
}

// testTokens is bearer-token authentication for three callers: root (an
// admin), alice (a member of project a) and bob (a member of project b),
// with their tokens.
type testTokens struct {
	auth             *auth.TokenAuth
	root, alice, bob string
}

func newTestTokens(t *testing.T) testTokens {
	t.Helper()
	var entries []auth.TokenEntry
	var toks []string
	for _, p := range []struct{ name, role, project string }{{"root", types.RoleAdmin, ""}, {"alice", types.RoleMember, "a"}, {"bob", types.RoleMember, "b"}} {
		tok, e, err := auth.NewToken(p.name, p.role, p.project)
		if err != nil {
			t.Fatal(err)
		}
		entries, toks = append(entries, e), append(toks, tok)
	}
	a, err := auth.NewTokenAuth(entries)
	if err != nil {
		t.Fatal(err)
	}
	return testTokens{auth: a, root: toks[0], alice: toks[1], bob: toks[2]}
}

// ctlServices is every controller role of the admin API served by the
// real controller c, and the flavors, images and secrets by the catalog
// over it, without a key manager (the daemon wires the same, and the
// other services beside them).
func ctlServices(c *controller.Controller) api.Services {
	return ctlServicesWith(c, catalog.Options{})
}

// ctlServicesWith is ctlServices with the catalog's key manager and LUKS
// tool in opts (the controller's own: the daemon gives both the same).
func ctlServicesWith(c *controller.Controller, opts catalog.Options) api.Services {
	if opts.Audit == nil {
		opts.Audit = c.Audit()
	}
	cat := catalog.New(c, opts)
	return api.Services{
		Instances: c, Power: c, Hotplug: c, ConfigDrives: c, Resize: c, Snapshot: c, Shelve: c, Hosts: c, Events: c,
		Flavors: cat, Images: cat, Secrets: cat,
	}
}
