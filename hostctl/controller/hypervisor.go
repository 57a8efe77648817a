package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
)

// Hypervisor is what the controller needs from libvirt; *virt.Conn
// provides it. Without one (hostctl serve --virt none) device addresses
// come from the spec.
type Hypervisor interface {
	// List returns every domain libvirt knows (ID -1 when not running).
	List(ctx context.Context) ([]virt.Domain, error)
	// Define defines or redefines a domain from its XML.
	Define(ctx context.Context, domainXML []byte) (virt.Domain, error)
	// Remove destroys and undefines a domain; a missing one is no error.
	Remove(ctx context.Context, name string) error
	Start(ctx context.Context, name string) error
	// Shutdown asks the guest to power off and returns at once.
	Shutdown(ctx context.Context, name string) error
	// Destroy powers the domain off at once.
	Destroy(ctx context.Context, name string) error
	State(ctx context.Context, name string) (virt.State, error)
	// XML is the live XML when live (the inactive one of a domain that
	// does not run), else the persistent definition.
	XML(ctx context.Context, name string, live bool) ([]byte, error)
	AttachDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error
	DetachDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error
	// UpdateDevice changes a device in place; the controller swaps the
	// config drive cdrom's medium with it (virt.ConfigDriveMediaXML,
	// live and forced).
	UpdateDevice(ctx context.Context, name string, deviceXML []byte, affect virt.Affect) error
	DHCPHosts(ctx context.Context, network string) ([]virt.DHCPHost, error)
	AddDHCPHost(ctx context.Context, network string, h virt.DHCPHost) error
	RemoveDHCPHost(ctx context.Context, network, mac string) error
	// Events delivers domain events and the connection's
	// disconnected/reconnected events; nil when there are none. The
	// controller keeps reading it until it is closed.
	Events() <-chan virt.Event
}

var _ Hypervisor = (*virt.Conn)(nil)

// Sentinel errors of the controller; the admin API maps each to an HTTP
// status (with model.ErrInvalidSpec, store.ErrNotFound, store.ErrConflict
// and virt.ErrUnreachable).
var (
	// ErrNoHypervisor: the request needs libvirt and the daemon runs
	// without (--virt none).
	ErrNoHypervisor = errors.New("no hypervisor (hostctl serve runs with --virt none)")
	// ErrState: the instance's domain is not in a state that allows the
	// request (missing, running where a change needs it shut off, ...).
	ErrState = errors.New("instance state does not allow this")
)

// Domain states beyond libvirt's own (virt.State).
const (
	// StateMissing: libvirt has no domain with the instance's name and
	// UUID (deleted behind hostctl's back).
	StateMissing = "missing"
	// StateUnknown: libvirtd could not be asked.
	StateUnknown = "unknown"
)

// fieldError is a one-field *model.SpecError.
func fieldError(field string, value any, format string, args ...any) error {
	return &model.SpecError{Errors: []model.FieldError{{Field: field, Value: value, Rule: fmt.Sprintf(format, args...)}}}
}
