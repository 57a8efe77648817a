package daemon

import (
	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/devices"
	"github.com/vmeta/vmeta/hostctl/shares"
)

// adminServices wires the admin API to the components that serve it:
// each narrow service of api.Services to its provider. The controller
// still provides the flavor registry, the image catalog and the secrets
// (its pass-throughs add the audit events and the in-use checks); as
// those move into their own packages, only these lines change.
func adminServices(ctl *controller.Controller, inv *devices.Inventory, shareSvc *shares.Service, keys keyService) api.Services {
	return api.Services{
		Instances:    ctl,
		Power:        ctl,
		Hotplug:      ctl,
		ConfigDrives: ctl,
		Resize:       ctl,
		Snapshot:     ctl,
		Shelve:       ctl,
		Hosts:        ctl,
		Events:       ctl,
		Flavors:      ctl,
		Images:       ctl,
		Secrets:      ctl,
		Keys:         keys,
		Shares:       shareSvc,
		Devices:      inv,
	}
}
