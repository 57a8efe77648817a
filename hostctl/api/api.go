// Package api is hostctl's admin API: JSON over HTTP on a unix socket (and
// an optional TCP listener), served by `hostctl serve`; its Go client is
// hostctl/api/client and its bodies are hostctl/api/types.
//
//	GET    /v1/instances                      list this host's (?all_hosts=1: every host's)
//	POST   /v1/instances                      apply a spec (YAML or JSON body)
//	GET    /v1/instances/{name}               show
//	DELETE /v1/instances/{name}               delete
//	GET    /v1/instances/{name}/configdrive   a config drive image (?format=iso9660|vfat)
//	POST   /v1/instances/{name}/start         boot the domain
//	POST   /v1/instances/{name}/stop          shut it down ({"timeout_seconds": N}), then power off
//	POST   /v1/instances/{name}/disks         create and attach a disk (types.DiskRequest)
//	DELETE /v1/instances/{name}/disks         detach a disk (?tag=T or ?target=vdX; &live=1 &config=1)
//	POST   /v1/instances/{name}/nics          attach a NIC (types.NICRequest)
//	DELETE /v1/instances/{name}/nics          detach a NIC (?tag=T or ?mac=M; &live=1 &config=1)
//	DELETE /v1/instances/{name}?force_from_store=1  forget another (dead) host's instance (admin)
//	POST   /v1/instances/{name}/adopt         take over a dead host's instance (admin)
//	POST   /v1/instances/{name}/resize        a stopped instance to another flavor (types.ResizeRequest)
//	POST   /v1/instances/{name}/rebuild       a stopped instance's root disk anew from an image (types.RebuildRequest)
//	POST   /v1/instances/{name}/snapshot      a stopped instance's root disk into a new image (types.SnapshotRequest; a member: its project's)
//	POST   /v1/instances/{name}/shelve        a stopped instance's root disk into the catalog, its host resources released
//	POST   /v1/instances/{name}/unshelve      a shelved instance's disks and domain back, started
//	POST   /v1/instances/{name}/rescue        boot a rescue disk made from an image (types.RescueRequest)
//	POST   /v1/instances/{name}/unrescue      the original domain back, started
//	GET    /v1/flavors[/{flavor}]             flavors (flavors.go); POST, DELETE (admin)
//	GET    /v1/images[/{image}]               the image directory (images.go); POST (multipart import), DELETE (admin)
//	GET    /v1/hosts                          the hosts sharing the store (admin)
//	GET    /v1/secrets                        key-manager secrets (metadata; a member: its project's)
//	POST   /v1/secrets                        create a secret (types.SecretRequest)
//	GET    /v1/secrets/{uuid}                 show one (never its value)
//	DELETE /v1/secrets/{uuid}                 delete one (409 while a disk uses it)
//	GET    /v1/events/{stream}                an audit stream's events (?after=ID&limit=N&wait=30s; admin)
//	GET    /v1/keys                           key rotation: every class's policy and status (admin; keys.go)
//	PUT    /v1/keys/{class}/policy            set a class's (?instance=N: an instance's) rotation policy
//	POST   /v1/keys/{class}/rotate            rotate once more; …/prune drops prior proxy secrets
//	GET    /v1/keys/proxy-secret/reveal       the current proxy secret (admin)
//	…      /v1/shares, /v1/servers/{id}/shares the share registry and Nova's server shares API (shares.go)
//	GET    /v1/whoami                         the caller's principal
//	GET    /v1/health                         {"status": "ok"}
//	GET    /v1/openapi.json                   this API's OpenAPI 3.1 description (openapi.yaml)
//
// Every instance request answers with the instance (types.Instance,
// whose "state" is its libvirt domain's state, "missing" when the domain
// was removed behind hostctl's back), except delete (204).
//
// The API is a set of resources on a gorilla/mux router: one file per
// resource, each declaring the small interface it needs (a field of
// Services, which the daemon wires) and adding its routes to its own
// subrouter (see routes).
// Authentication and project scoping are middleware (middleware.go).
//
// On the unix socket every caller is an administrator. On the optional TCP
// listener callers authenticate with "Authorization: Bearer <token>"
// (auth.TokenAuth): admins see everything, members only their project's
// instances — to a member, another project's instance does not exist.
//
// Errors are types.Error: {"error": "...", "fields": [{"field","value","rule"}]}
// with 400 for an invalid spec or request, 401 without a valid token, 403
// outside the caller's project, 404 for an unknown instance, device or
// path, 405 (with Allow) for a method a path does not take, 409 for a
// conflict or a domain state that does not allow the request, 501 for a
// libvirt request to a daemon without libvirt, 503 when libvirtd is
// unreachable. Errors carry a kind (package internal/errkind: the
// packages' sentinels carry theirs); the mapping of kinds to statuses
// lives in one place, statusOf (errors.go), and the client maps the
// statuses back to the kinds.
package api

import (
	"log/slog"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/auth"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/logbudget"
)

// Services are what the admin API serves, each a narrow interface
// declared beside the resource that uses it (instances.go, flavors.go, …).
// The daemon wires each to the component that provides it — the
// controller's lifecycle role, the flavor registry, the image catalog,
// the key manager, the share service, the device inventory, key rotation
// — and a test to the one fake it needs. A service left nil is not served:
// its routes answer 501 and name it.
type Services struct {
	// The controller's lifecycle role, one interface per resource.
	Instances    InstanceService    // apply, show, list, delete
	Power        PowerService       // start, stop
	Reboot       RebootService      // reboot, hard or soft
	Hotplug      HotplugService     // disks and NICs
	ConfigDrives ConfigDriveService // config drive images
	Resize       ResizeService      // resize, rebuild
	Snapshot     SnapshotService    // a root disk into an image
	Shelve       ShelveService      // shelve, unshelve, rescue, unrescue
	Hosts        HostService        // the hosts sharing the store (hostctl/hosts)
	Ownership    OwnershipService   // adopt, forced delete
	Events       EventService       // the audit streams (hostctl/events)
	Migrations   MigrationService   // moves between hosts (hostctl/migrate)
	Evacuations  EvacuationService  // rebuilds of down hosts' instances (hostctl/migrate)

	Flavors FlavorService // the flavor registry
	Images  ImageService  // the image catalog
	Secrets SecretService // the key manager's secrets
	Keys    KeyService    // key rotation
	Shares  ShareService  // the share registry and server shares
	Devices DeviceService // the device inventory
}

// Handler returns the admin API handler for the unix socket, where every
// caller is auth.Local.
func Handler(s Services, log *slog.Logger) http.Handler {
	return NewHandler(s, log, auth.LocalAuth{})
}

// NewHandler returns the admin API handler, authenticating every request
// with a (an *auth.TokenAuth on a TCP listener). Authentication wraps the
// router, so that an unauthenticated caller learns nothing of the routes
// (not even a 405).
func NewHandler(s Services, log *slog.Logger, a auth.Authenticator) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	e := errorWriter{log: log, refusals: logbudget.New(0, 0, nil)}
	h := authenticate(a, e, routes(s, e))
	if handlerHook != nil {
		h = handlerHook(h) // tests: openapi_hook_test.go
	}
	return h
}

// routes builds the router: a subrouter per resource under /v1.
func routes(s Services, e errorWriter) *mux.Router {
	root := mux.NewRouter()
	v1 := root.PathPrefix("/v1").Subrouter()

	inst := e.served(v1.PathPrefix("/instances").Subrouter(), s.Instances != nil, "instances")
	insts := instances{svc: s.Instances, errorWriter: e}
	insts.routes(inst)
	// One instance: the project scoping middleware resolves {name} once,
	// for every sub-resource below.
	one := inst.PathPrefix("/{name}").Subrouter()
	one.Use(scopeInstance(s.Instances, e))
	hs := hosts{svc: s.Hosts, own: s.Ownership, errorWriter: e}
	hs.instanceRoutes(e.served(one, s.Ownership != nil, "adopt and forced delete")) // before the plain DELETE: it matches on its query
	insts.instanceRoutes(one)
	configDrives{svc: s.ConfigDrives, errorWriter: e}.routes(e.served(one, s.ConfigDrives != nil, "config drives"))
	power{svc: s.Power, errorWriter: e}.routes(e.served(one, s.Power != nil, "power requests"))
	reboot{svc: s.Reboot, errorWriter: e}.routes(e.served(one, s.Reboot != nil, "reboots"))
	hotplug{svc: s.Hotplug, errorWriter: e}.routes(e.served(one, s.Hotplug != nil, "disk and NIC hotplug"))
	resize{svc: s.Resize, errorWriter: e}.routes(e.served(one, s.Resize != nil, "resize and rebuild"))
	snapshot{svc: s.Snapshot, secrets: s.Secrets, errorWriter: e}.routes(e.served(one, s.Snapshot != nil, "snapshots"))
	shelve{svc: s.Shelve, errorWriter: e}.routes(e.served(one, s.Shelve != nil, "shelve and rescue"))
	migrations{svc: s.Migrations, errorWriter: e}.routes(e.served(one, s.Migrations != nil, "moves between hosts")) // migrate.go
	evacuations{svc: s.Evacuations, errorWriter: e}.routes(e.served(one, s.Evacuations != nil, "evacuations"))

	flavors{svc: s.Flavors, errorWriter: e}.routes(e.served(v1.PathPrefix("/flavors").Subrouter(), s.Flavors != nil, "flavors"))
	images{svc: s.Images, errorWriter: e}.routes(e.served(v1.PathPrefix("/images").Subrouter(), s.Images != nil, "images"))
	auditEvents{svc: s.Events, errorWriter: e}.routes(e.served(v1.PathPrefix("/events").Subrouter(), s.Events != nil, "audit events"))
	if s.Shares != nil {
		sharesAPI{svc: s.Shares, errorWriter: e}.routes(v1) // shares.go
	} else {
		noShares{e}.routes(v1)
	}
	keysAPI{svc: s.Keys, errorWriter: e}.routes(v1.PathPrefix("/keys").Subrouter()) // keys.go

	hs.routes(e.served(v1.PathPrefix("/hosts").Subrouter(), s.Hosts != nil, "hosts"))
	secrets{svc: s.Secrets, errorWriter: e}.routes(e.served(v1.PathPrefix("/secrets").Subrouter(), s.Secrets != nil, "secrets"))
	devices{svc: s.Devices, errorWriter: e}.routes(v1.PathPrefix("/devices").Subrouter()) // devices.go: 501 without
	system{errorWriter: e}.routes(v1)
	e.openAPIRoutes(v1) // openapi.go

	root.NotFoundHandler = headAsGet(root, unmatched(root, e)) // head.go
	root.MethodNotAllowedHandler = root.NotFoundHandler
	return root
}

// served returns r for the routes of a service the daemon serves, and
// for one it does not (served false) a subrouter of r whose routes all
// answer 501 naming what: the paths and methods stay the same, so a
// request learns that the daemon does not serve it rather than that the
// path does not exist.
func (e errorWriter) served(r *mux.Router, served bool, what string) *mux.Router {
	if served {
		return r
	}
	sub := r.NewRoute().Subrouter()
	sub.Use(func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			e.fail(w, r, errkind.Errorf(errkind.Unsupported, "this daemon does not serve %s", what))
		})
	})
	return sub
}
