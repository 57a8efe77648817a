package daemon

import (
	"log/slog"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/catalog"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// TestCatalogServedOutsideTheCore (issue 22, items 1 and 7): the admin
// API's flavors, images and secrets are served by hostctl/catalog, and
// the controller no longer offers them (its pass-throughs left the core).
func TestCatalogServedOutsideTheCore(t *testing.T) {
	var ctl any = (*controller.Controller)(nil)
	for name, served := range map[string]bool{
		"api.FlavorService": implements[api.FlavorService](ctl),
		"api.ImageService":  implements[api.ImageService](ctl),
		"api.SecretService": implements[api.SecretService](ctl),
	} {
		if served {
			t.Errorf("the controller serves %s: that belongs to hostctl/catalog", name)
		}
	}

	dir := t.TempDir()
	st := stores.BoltIn(t, dir)
	c := controller.New(st, controller.Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	cat := catalog.New(catalog.Options{})
	s := adminServices(c, cat, nil, nil, keyService{}, nil, nil)
	for name, svc := range map[string]any{"flavors": s.Flavors, "images": s.Images, "secrets": s.Secrets} {
		if svc != any(cat) {
			t.Errorf("%s served by %T, want the catalog", name, svc)
		}
	}
}

func implements[I any](v any) bool {
	_, ok := v.(I)
	return ok
}
