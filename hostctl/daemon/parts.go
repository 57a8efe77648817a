package daemon

import (
	"log/slog"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/diskrotate"
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

// Parts are the host features the daemon registers with the controller
// core (hostctl/part), in the order the core calls their phases. A new
// part is added here and answers every operation (parts_test.go checks).
// hv is the hypervisor (its networks, its domains' definitions; nil with
// --virt none), defaultNet the network of a NIC that names none; bind
// gives the parts that need it the core, once it exists; keyRecords is the key rotation engine
// (nil: none), whose records of an instance go with it; the share
// service (sh) is the shares part; fl keeps the faults of instances in
// ERROR (a share that could not be mounted), last: the other parts
// refuse a start for their own reasons first; the instances' states
// (shelved, rescued) are kept in records (nil: none) by host. The states
// part comes first: its Check refuses what a shelved or rescued instance
// must not undergo before any other part acts.
func Parts(inv passthrough.Inventory, hv PartsHypervisor, defaultNet string, keyRecords diskrotate.Forgetter, sh *shares.Service, fl *faults.Part, records store.Records, host string) (parts []part.Part, bind func(*controller.Controller, *slog.Logger)) {
	pt := passthrough.New(inv)
	vs := vmstate.New(records, host)
	parts = []part.Part{
		vs,
		pt,
		nics.New(hv, defaultNet),
		watchdog.New(),
		diskrotate.NewForget(keyRecords),
	}
	if sh != nil {
		parts = append(parts, sh)
	}
	parts = append(parts, fl)
	return parts, func(c *controller.Controller, log *slog.Logger) {
		pt.Bind(c, hv, log)
		vs.Bind(c.ImageDir(), c, log)
	}
}

// diskPart makes the disks part (hostctl/parts/disks) over the core
// (controller.Options.Disks): the instances' disks, their encryption and
// block-device records, and the key-manager secrets' deletion rule. The
// disk passphrase rotator works on the same part (s.disks).
func (s *serve) diskPart(c *controller.Controller) controller.Disks {
	s.disks = disks.New(c)
	return s.disks
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
