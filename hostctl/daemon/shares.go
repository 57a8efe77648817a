package daemon

import (
	"context"
	"flag"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/events"
	"github.com/vmeta/vmeta/hostctl/ops"
	"github.com/vmeta/vmeta/hostctl/shares"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store"
)

// ShareConfig is the configuration of the share service (`hostctl serve`
// flags).
type ShareConfig struct {
	// ReconcileInterval is how often leaked share mappings and host mounts
	// are looked for (besides the pass at start-up).
	ReconcileInterval time.Duration
	// InstanceEvents adds the instance's share mappings to instance.update
	// events (stream "instances"), emitted when a mapping changes.
	InstanceEvents bool
}

// AddFlags registers the share flags on fs.
func (c *ShareConfig) AddFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.ReconcileInterval, "share-reconcile-interval", shares.DefaultReconcileInterval, "how often leftover share mappings and NFS host mounts (of instances deleted or steps interrupted) are cleaned up, besides the pass at start-up")
	fs.BoolVar(&c.InstanceEvents, "events-include-share-mappings", false, "emit instance.update events (stream instances) carrying the instance's share mappings whenever one changes")
}

// shareCore is the controller as the share service calls it
// (shares.Instances), with the live device changes of hostctl/ops for its
// live attach and detach (shares.LiveCore). The service is a part the
// controller is built with, so it is made first; both are set right
// after the controller is built, before anything runs.
type shareCore struct {
	*controller.Controller
	*ops.LiveDevices
}

// newShares makes the share service (registry, mappings, host mounts;
// its reconciler runs from Start), a part of the controller (parts.go).
func newShares(cfg Config, st store.Store, core shares.Instances, support func(context.Context) (virt.ShareSupport, error), host string, audit *events.Log, log *slog.Logger, km *keys.Manager) *shares.Service {
	root := cfg.Virt.ShareRoot
	if root == "" {
		root = filepath.Join(cfg.DataDir, "shares")
	}
	interval := cfg.Shares.ReconcileInterval
	if interval <= 0 {
		interval = -1
	}
	// CephFS shares: this host's CephX client, its keys in the key
	// manager, keyrings given to ceph-fuse through DATA-DIR/run/ceph.
	var cx *shares.CephX
	if recs, ok := st.(store.Records); ok && km != nil {
		cx = shares.NewCephX(shares.CephXOptions{Host: host, Store: recs, Keys: km, RunDir: filepath.Join(cfg.DataDir, "run", "ceph"), Logger: log})
	}
	return shares.New(st, core, shares.Options{Host: host, ShareRoot: root, Logger: log, Events: audit, Support: support,
		ReconcileInterval: interval, InstanceUpdateEvents: cfg.Shares.InstanceEvents, CephX: cx})
}

// shareSupport is what this host's libvirt offers shares, asked until it
// offered them once (the domain capabilities do not change while libvirtd
// runs); nil for --virt none.
func (h *hypervisor) shareSupport() func(context.Context) (virt.ShareSupport, error) {
	if h.conn == nil {
		return nil
	}
	var ok atomic.Bool
	return func(ctx context.Context) (virt.ShareSupport, error) {
		if ok.Load() {
			return virt.ShareSupport{Virtiofs: true, SharedMemory: true}, nil
		}
		sup, err := h.conn.ShareSupport(ctx, h.dom.Type, h.dom.Machine)
		if err == nil && sup.Check() == nil {
			ok.Store(true)
		}
		return sup, err
	}
}
