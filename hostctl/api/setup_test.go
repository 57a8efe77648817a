package api_test

import (
	"context"
	"github.com/vmeta/vmeta/hostctl/parts/configdrive"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/auth"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/catalog"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/ops"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
	"github.com/vmeta/vmeta/internal/testenv"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// newController returns a controller without a hypervisor over an
// embedded store in a temporary data directory, and that directory.
func newController(t *testing.T) (*controller.Controller, string) {
	t.Helper()
	dir := t.TempDir()
	return newControllerIn(t, dir, stores.BoltIn(t, dir), controller.Options{}, disks.Options{}), dir
}

// newControllerIn is the controller over st with data directory dir and
// the rest of opts; a nil Logger discards. Its disks part is registered
// as the daemon wires it, with the key manager and the LUKS tool of
// dopts (the LUKS tool over opts.QemuImg when it names none).
func newControllerIn(t *testing.T, dir string, st store.Store, opts controller.Options, dopts disks.Options) *controller.Controller {
	t.Helper()
	opts.DataDir = dir
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Images = images.New(filepath.Join(dir, "images"), images.Options{QemuImg: opts.QemuImg})
	dopts.Records, _ = st.(store.Records)
	dopts.Instances, dopts.Catalog, dopts.DataDir, dopts.Host, dopts.Logger = st, opts.Images, dir, opts.Host, opts.Logger
	if s, ok := opts.Hypervisor.(disks.LibvirtSecrets); ok {
		dopts.Secrets = s
	}
	if dopts.LUKS == nil {
		dopts.LUKS = encryption.New(encryption.Options{QemuImg: opts.QemuImg})
	}
	dp := disks.New(dopts)
	opts.Parts = append([]part.Part{dp}, opts.Parts...) // first, as the daemon registers it
	c := controller.New(st, opts)
	dp.Bind(c, nil)
	return c
}

// diskPart is the disks part registered with c.
func diskPart(c *controller.Controller) *disks.Part {
	for _, p := range c.Parts() {
		if dp, ok := p.(*disks.Part); ok {
			return dp
		}
	}
	panic("no disks part")
}

// catalogOf is the catalog over c's disks part and records as the daemon
// wires it, with the rest of opts.
func catalogOf(c *controller.Controller, opts catalog.Options) *catalog.Catalog {
	dp := diskPart(c)
	if dp.Records != nil {
		opts.Flavors = &flavors.Registry{Store: dp.Records}
	}
	opts.Images, opts.Secrets = dp.ImageDir(), dp
	opts.Users = catalog.StoreUsers{Instances: dp.Instances.(store.Store), Host: dp.Host}
	return catalog.New(opts)
}

// keyed is a controller with a key manager, over an embedded store in a
// temporary data directory.
type keyed struct {
	ctl *controller.Controller
	km  *keys.Manager
	st  *bolt.Store
	dir string
}

// newKeyedController is newController with a key manager for host over
// the same store and data directory (the disks part's, with the LUKS
// tool luks; nil: over opts.QemuImg), and opts.
func newKeyedController(t *testing.T, host string, opts controller.Options, luks disks.LUKS) keyed {
	t.Helper()
	k := keyed{dir: t.TempDir()}
	k.st = stores.BoltIn(t, k.dir)
	var err error
	if k.km, err = keys.Open(context.Background(), k.st, k.dir, keys.Options{Host: host}); err != nil {
		t.Fatal(err)
	}
	k.ctl = newControllerIn(t, k.dir, k.st, opts, disks.Options{Keys: k.km, LUKS: luks})
	return k
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
	cat := catalogOf(c, opts)
	op := ops.New(c)
	return api.Services{
		Instances: c, Power: c, Reboot: op, Hotplug: op, ConfigDrives: configdrive.NewBuilder(c, c.Documents(), c.DataDir()), Resize: op, Snapshot: op, Shelve: op, Ownership: op,
		Flavors: cat, Images: cat, Secrets: cat,
	}
}

// do sends a request with the bearer token tok (none when empty) and
// returns the status and the body.
func do(t *testing.T, method, url, tok, body string) (int, string) {
	t.Helper()
	h := http.Header{}
	if tok != "" {
		h.Set("Authorization", "Bearer "+tok)
	}
	return testenv.HTTP(t, method, url, h, body)
}
