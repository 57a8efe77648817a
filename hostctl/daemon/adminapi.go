package daemon

import (
	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/catalog"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/devices"
	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/ops"
	"github.com/vmeta/vmeta/hostctl/parts/configdrive"
	"github.com/vmeta/vmeta/hostctl/parts/vmstate"
	"github.com/vmeta/vmeta/hostctl/shares"
	"github.com/vmeta/vmeta/internal/store"
)

// adminServices wires the admin API to the components that serve it:
// each narrow service of api.Services to its provider. The controller
// serves its lifecycle role; the catalog (hostctl/catalog) the flavor registry, the image catalog and the
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

// catalog is the flavor registry, the image catalog and the secrets:
// over the store's records, the image directory and the one rule for
// deleting secrets of the disks part, with the key manager and the audit
// log.
func (s *serve) catalog() *catalog.Catalog {
	var reg *flavors.Registry
	if recs, ok := s.ctlStore.(store.Records); ok {
		reg = &flavors.Registry{Store: recs}
	}
	users := catalog.StoreUsers{Instances: s.ctlStore, Host: s.hostName}
	for _, p := range s.ctl.Parts() {
		if vs, ok := p.(*vmstate.Part); ok {
			users.States = vs // its shelved instances name their images
		}
	}
	return catalog.New(catalog.Options{Flavors: reg, Images: s.disks.ImageDir(), Users: users, Secrets: s.disks,
		Keys: s.km, Audit: s.audit, Logger: s.log})
}
