package daemon

import (
	"log/slog"
	"path/filepath"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/shares"
	"github.com/vmeta/vmeta/internal/store"
)

// newShares starts the share service (registry, mappings, host mounts,
// reconciler) and installs it in the controller.
func newShares(cfg Config, st store.Store, ctl *controller.Controller, host string, log *slog.Logger) *shares.Service {
	root := cfg.Virt.ShareRoot
	if root == "" {
		root = filepath.Join(cfg.DataDir, "shares")
	}
	svc := shares.New(st, ctl, shares.Options{Host: host, ShareRoot: root, Logger: log, Events: ctl.Audit()})
	ctl.SetShareHooks(svc)
	svc.Start()
	return svc
}
