package api

import (
	"log/slog"

	"github.com/gorilla/mux"
)

// Route is one route of the admin API's router: a method and a path
// template (mux's, "/v1/instances/{name}") and the query it matches on
// (mux's Queries: "force_from_store={force}"), if any.
type Route struct {
	Method, Path string
	Queries      []string
}

// ServedRoutes walks the router NewHandler builds when every service is
// served (a stub stands for each: nothing is called on a walk) and
// returns every route that takes a method. Routes without one are the
// catch-alls of services not served (501), which this router has none
// of.
func ServedRoutes() []Route {
	s := Services{
		Instances: struct{ InstanceService }{}, Power: struct{ PowerService }{}, Reboot: struct{ RebootService }{},
		Hotplug: struct{ HotplugService }{}, ConfigDrives: struct{ ConfigDriveService }{}, Resize: struct{ ResizeService }{},
		Snapshot: struct{ SnapshotService }{}, Shelve: struct{ ShelveService }{}, Hosts: struct{ HostService }{},
		Ownership: struct{ OwnershipService }{}, Events: struct{ EventService }{}, Flavors: struct{ FlavorService }{},
		Images: struct{ ImageService }{}, Secrets: struct{ SecretService }{}, Keys: struct{ KeyService }{},
		Shares: struct{ ShareService }{}, Devices: struct{ DeviceService }{},
		Migrations: struct{ MigrationService }{}, Evacuations: struct{ EvacuationService }{},
	}
	var out []Route
	_ = routes(s, errorWriter{log: slog.New(slog.DiscardHandler)}).Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		ms, err := route.GetMethods()
		if err != nil {
			return nil // a subrouter's prefix, or a catch-all
		}
		tpl, err := route.GetPathTemplate()
		if err != nil {
			return nil
		}
		qs, _ := route.GetQueriesTemplates()
		for _, m := range ms {
			out = append(out, Route{Method: m, Path: tpl, Queries: qs})
		}
		return nil
	})
	return out
}
