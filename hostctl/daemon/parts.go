package daemon

import (
	"log/slog"
	"path/filepath"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/diskrotate"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/migrate"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/hostctl/parts/faults"
	"github.com/vmeta/vmeta/hostctl/parts/nics"
	"github.com/vmeta/vmeta/hostctl/parts/passthrough"
	"github.com/vmeta/vmeta/hostctl/parts/vmstate"
	"github.com/vmeta/vmeta/hostctl/parts/watchdog"
	"github.com/vmeta/vmeta/hostctl/shares"
	"github.com/vmeta/vmeta/internal/store"
)

// PartsConfig is what the parts are made of.
type PartsConfig struct {
	// Inventory is the passthrough devices' inventory.
	Inventory passthrough.Inventory
	// Hypervisor: its networks, its domains' definitions (nil with
	// --virt none).
	Hypervisor PartsHypervisor
	// DefaultNetwork is the network of a NIC that names none.
	DefaultNetwork string
	// Disks is the disks part (diskPart); it reads the states part's
	// records.
	Disks *disks.Part
	// KeyRecords is the key rotation engine (nil: none), whose records of
	// an instance go with it.
	KeyRecords diskrotate.Forgetter
	// Shares is the share service, the shares part (nil: none).
	Shares *shares.Service
	// Faults keeps the faults of instances in ERROR (a share that could
	// not be mounted).
	Faults *faults.Part
	// Records keep the instances' states (shelved, rescued) by Host (nil:
	// none).
	Records store.Records
	// Host is this host's name.
	Host string
}

// Parts are the host features the daemon registers with the controller
// core (hostctl/part), in the order the core calls their phases. A new
// part is added here and answers every operation (parts_test.go checks).
// bind gives the parts that need it the core, once it exists. The disks
// part comes first (its Check refuses nothing; its AfterDelete lets go of
// the disks' secrets before the states part deletes a shelved instance's
// image), then the states part: its Check refuses what a shelved or
// rescued instance must not undergo before any other part acts. The
// faults part is last: the other parts refuse a start for their own
// reasons first.
func Parts(cfg PartsConfig) (parts []part.Part, bind func(*controller.Controller, *slog.Logger)) {
	inv, hv, dp, sh, fl := cfg.Inventory, cfg.Hypervisor, cfg.Disks, cfg.Shares, cfg.Faults
	vs := vmstate.New(cfg.Records, cfg.Host)
	pt := passthrough.New(inv)
	mp := migrate.NewPart(cfg.Records, vs)
	parts = []part.Part{
		dp,
		migrate.NewEvacuationPart(cfg.Records, mp), // before the moves: an evacuation's state is shown first
		mp, // before vmstate: a move's state is shown first (hostctl/migrate)
		vs,
		pt,
		nics.New(hv, cfg.DefaultNetwork),
		watchdog.New(),
		diskrotate.NewForget(cfg.KeyRecords),
	}
	if sh != nil {
		parts = append(parts, sh)
	}
	parts = append(parts, fl)
	return parts, func(c *controller.Controller, log *slog.Logger) {
		pt.Bind(c, hv, log)
		vs.Bind(dp.ImageDir(), c, log)
		dp.Bind(c, vs)
	}
}

// diskPart makes the disks part (hostctl/parts/disks) with its handles:
// the instances' disks over the image directory imgs, their encryption
// (the key manager, the LUKS tool, libvirt's secrets, this host's
// formats) and block-device records, and the key-manager secrets'
// deletion rule. The core, the operations, the catalog and the disk
// passphrase rotator work on the same part (s.disks).
func (s *serve) diskPart(imgs *images.Dir) *disks.Part {
	recs, _ := s.ctlStore.(store.Records)
	enc := s.chk.encHost
	if len(enc.Formats) == 0 {
		enc = controller.DefaultEncryptionHost
	}
	return disks.New(disks.Options{Keys: s.km, LUKS: luksTool(s.cfg), Secrets: s.hv.secrets(), Records: recs,
		Instances: s.ctlStore, Catalog: imgs, DefaultFormat: enc.DefaultFormat, Support: s.prober.Support,
		DataDir: s.cfg.DataDir, Host: s.hostName, Logger: s.log})
}

// imageDir is the image directory (hostctl/images) the core, the disks
// and states parts and the catalog share: --image-dir with a hypervisor,
// DATA-DIR/images otherwise.
func (h *hypervisor) imageDir(dataDir string) *images.Dir {
	dir := filepath.Join(dataDir, "images")
	if h.conn != nil && h.cfg.ImageDir != "" {
		dir = h.cfg.ImageDir
	}
	return images.New(dir, images.Options{})
}

// secrets is libvirt's secrets (nil with --virt none).
func (h *hypervisor) secrets() disks.LibvirtSecrets {
	if h.conn == nil {
		return nil
	}
	return h.conn
}

// PartsHypervisor is the hypervisor (*virt.Conn) as the parts use it:
// the nics part its networks, the passthrough part its domains'
// definitions.
type PartsHypervisor interface {
	nics.Network
	passthrough.Definitions
}

// network is the hypervisor as the parts use it (nil with --virt none).
func (h *hypervisor) network() PartsHypervisor {
	if h.conn == nil {
		return nil
	}
	return h.conn
}
