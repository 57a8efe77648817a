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
//
// Every instance request answers with the instance (types.Instance,
// whose "state" is its libvirt domain's state, "missing" when the domain
// was removed behind hostctl's back), except delete (204).
//
// The API is a set of resources on a gorilla/mux router: one file per
// resource, each declaring the small interface it needs from the
// controller and adding its routes to its own subrouter (see routes).
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
// unreachable; the mapping lives in one place, statusOf (errors.go).
package api

import (
	"log/slog"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/vmeta/vmeta/hostctl/api/auth"
	"github.com/vmeta/vmeta/internal/logbudget"
)

// Controller is everything the API's resources need from hostctl's
// controller; each resource takes only its own part.
type Controller interface {
	instanceService
	configDriveService
	powerService
	hotplugService
	hostService
	secretService
	flavorService
	imageService
	resizeService
	snapshotService
	shelveService
	eventService
}

// Handler returns the admin API handler for the unix socket, where every
// caller is auth.Local.
func Handler(c Controller, log *slog.Logger, opts ...Option) http.Handler {
	return NewHandler(c, log, auth.LocalAuth{}, opts...)
}

// NewHandler returns the admin API handler, authenticating every request
// with a (an *auth.TokenAuth on a TCP listener). Authentication wraps the
// router, so that an unauthenticated caller learns nothing of the routes
// (not even a 405).
func NewHandler(c Controller, log *slog.Logger, a auth.Authenticator, opts ...Option) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	e := errorWriter{log: log, refusals: logbudget.New(0, 0, nil)}
	root := routes(c, e, o)
	devices{svc: o.devices, errorWriter: e}.routes(root.PathPrefix("/v1/devices").Subrouter())
	return authenticate(a, e, root)
}

// Option adds an optional resource to the handler (WithDevices,
// WithShares).
type Option func(*options)

type options struct {
	devices DeviceService
	shares  ShareService
	keys    KeyService
}

// routes builds the router: a subrouter per resource under /v1.
func routes(c Controller, e errorWriter, o options) *mux.Router {
	root := mux.NewRouter()
	v1 := root.PathPrefix("/v1").Subrouter()

	insts := instances{svc: c, errorWriter: e}
	inst := v1.PathPrefix("/instances").Subrouter()
	insts.routes(inst)
	// One instance: the project scoping middleware resolves {name} once,
	// for every sub-resource below.
	one := inst.PathPrefix("/{name}").Subrouter()
	one.Use(scopeInstance(c, e))
	hs := hosts{svc: c, errorWriter: e}
	hs.instanceRoutes(one) // before the plain DELETE: it matches on its query
	insts.instanceRoutes(one)
	configDrives{svc: c, errorWriter: e}.routes(one)
	power{svc: c, errorWriter: e}.routes(one)
	hotplug{svc: c, errorWriter: e}.routes(one)
	resize{svc: c, errorWriter: e}.routes(one)
	snapshot{svc: c, errorWriter: e}.routes(one)
	shelve{svc: c, errorWriter: e}.routes(one)

	flavors{svc: c, errorWriter: e}.routes(v1.PathPrefix("/flavors").Subrouter())
	images{svc: c, errorWriter: e}.routes(v1.PathPrefix("/images").Subrouter())
	auditEvents{svc: c, errorWriter: e}.routes(v1.PathPrefix("/events").Subrouter())
	if o.shares != nil {
		sharesAPI{svc: o.shares, errorWriter: e}.routes(v1) // shares.go
	} else {
		noShares{e}.routes(v1)
	}
	keysAPI{svc: o.keys, errorWriter: e}.routes(v1.PathPrefix("/keys").Subrouter()) // keys.go

	hs.routes(v1.PathPrefix("/hosts").Subrouter())
	secrets{svc: c, errorWriter: e}.routes(v1.PathPrefix("/secrets").Subrouter())
	system{errorWriter: e}.routes(v1)

	root.NotFoundHandler = headAsGet(root, unmatched(root, e)) // head.go
	root.MethodNotAllowedHandler = root.NotFoundHandler
	return root
}
