package daemon

import (
	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/catalog"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/devices"
	"github.com/vmeta/vmeta/hostctl/ops"
	"github.com/vmeta/vmeta/hostctl/parts/configdrive"
	"github.com/vmeta/vmeta/hostctl/shares"
)

// adminServices wires the admin API to the components that serve it:
// each narrow service of api.Services to its provider. The controller
// serves its lifecycle role; the catalog (hostctl/catalog, over the
// controller's core) the flavor registry, the image catalog and the
// secrets; the operations (hostctl/ops, over the controller's core)
// shelve, rescue, resize, rebuild, snapshot, reboot, the hot-plug of
// disks and NICs, and the adopt and forced delete of a dead host's
// instance; the host registry (hostctl/hosts) the hosts sharing the
// store, and the audit log (hostctl/events) its streams.
func adminServices(ctl *controller.Controller, cat *catalog.Catalog, inv *devices.Inventory, shareSvc *shares.Service, keys keyService,
	hostReg api.HostService, audit api.EventService) api.Services {
	op := ops.New(ctl)
	return api.Services{
		Instances:    ctl,
		Power:        ctl,
		Reboot:       op,
		Hotplug:      op,
		ConfigDrives: configdrive.NewBuilder(ctl, ctl.Documents(), ctl.DataDir()),
		Resize:       op,
		Snapshot:     op,
		Shelve:       op,
		Hosts:        hostReg,
		Ownership:    op,
		Events:       audit,
		Flavors:      cat,
		Images:       cat,
		Secrets:      cat,
		Keys:         keys,
		Shares:       shareSvc,
		Devices:      inv,
	}
}

// catalog is the flavor registry, the image catalog and the secrets over
// the controller's core, with the key manager and the audit log the
// controller has.
func (s *serve) catalog() *catalog.Catalog {
	return catalog.New(s.ctl, catalog.Options{Keys: s.km, Audit: s.audit, Logger: s.log})
}
