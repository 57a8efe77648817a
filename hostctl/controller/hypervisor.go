package controller

import (
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/view"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/errkind"
)

// Hypervisor is everything the controller asks of libvirt: the roles its
// parts declare (Domains in domain.go, HotPlug in core_devchange.go).
// *virt.Conn plays every role. Without one (hostctl serve --virt none)
// device addresses come from the spec (driver.go).
type Hypervisor interface {
	Domains
	HotPlug
}

var _ Hypervisor = (*virt.Conn)(nil)

// Sentinel errors of the controller; each carries its kind (package
// errkind), which the admin API maps to an HTTP status.
var (
	// ErrNoHypervisor: the request needs libvirt and the daemon runs
	// without (--virt none).
	ErrNoHypervisor = errkind.New(errkind.Unsupported, "no hypervisor (hostctl serve runs with --virt none)")
	// ErrState: the instance's domain is not in a state that allows the
	// request (missing, running where a change needs it shut off, ...).
	// The parts' (hostctl/part) refusals by state are this error too.
	ErrState = part.ErrState
)

// Domain states beyond libvirt's own (virt.State).
const (
	// StateMissing: libvirt has no domain with the instance's name and
	// UUID (deleted behind hostctl's back).
	StateMissing = "missing"
	// StateUnknown: libvirtd could not be asked.
	StateUnknown = "unknown"
	// StateError: a start failed because a share could not be mounted
	// (part.ErrMountFailed, a part keeps the fault) and the domain does
	// not run (view.WithFault); Instance.Fault says why.
	StateError = view.Error
)
