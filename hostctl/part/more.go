package part

import (
	"context"
	"errors"
	"fmt"

	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// More optional phases (besides those of part.go). The shares part
// needs Completer and Committer (and Starter); the faults part
// StartFailer.

// Completer is a part that completes the instance's spec before the core
// checks an operation on it (today: apply). The shares part decides the
// instance's shares there: its mapped shares, and the attach of those the
// spec names that it does not have yet.
type Completer interface {
	// Complete completes in.Spec for op and registers on r the undo of
	// anything it changed (run when the operation fails). Nothing else of
	// the operation has been done yet.
	Complete(ctx context.Context, op Op, in *Instance, r *revert.Reverter) error
}

// Committer is a part with work once an operation it acts on stands (the
// instance's record written, or removed by a force-delete): the shares
// part finishes the attaches an apply's Complete began, and drops the
// mappings of an instance deleted from the store.
type Committer interface {
	// Committed returns notes for the operation's answer (an apply's
	// warnings, what a force-delete leaves on the dead host); what fails
	// here is the part's to finish later (its reconciler).
	Committed(ctx context.Context, op Op, in *Instance) []string
}

// StartFailer is a part with work when the start of an instance's
// domain failed, whatever the operation (the faults part: a share that
// could not be mounted puts the instance in ERROR). Its Instance has
// Spec and Host.
type StartFailer interface {
	// StartFailed is told the start's error err; its own error (what
	// it could not do) joins err.
	StartFailed(ctx context.Context, in *Instance, err error) error
}

// Mover is a part that holds something of an instance on one host that
// a move must give back on that host alone (the instance lives on on the
// other one): on the source once a migration is confirmed, on the
// destination once it is reverted. Passthrough claims and DHCP entries
// are per host; the store's records of the instance are not touched.
type Mover interface {
	// Moved is told op (ConfirmMigration on the source,
	// RevertMigration on the destination, Evacuate on an evacuated
	// instance's old host once it is back): the instance has left this
	// host. It must do nothing the second time (a retried confirm).
	Moved(ctx context.Context, op Op, in *Instance) error
}

// ErrState is the error kind of a refusal because of the instance's state
// (the controller's ErrState is this one): a part refusing an operation
// or a request by the instance's state wraps it.
var ErrState = errkind.New(errkind.Conflict, "instance state does not allow this")

// ErrMountFailed is wrapped by a BeforeStart error when a share could not
// be mounted (a *MountError): the start that hit it puts the instance in
// ERROR until a hard reboot.
var ErrMountFailed = errors.New("share mount failed")

// MountError is the error of BeforeStart when a share could not be
// mounted on the host. The instance's fault names the share only: the
// mount's own words (host paths, the filer's answer) stay in the
// mapping's error, which admins see, and in the start's error.
type MountError struct {
	Share    string // the share's id
	Instance string // the instance's name
	Err      error
}

func (e *MountError) Error() string {
	return fmt.Sprintf("%v (the instance is in ERROR until a hard reboot): share %s on instance %s could not be mounted on the host: %v", ErrMountFailed, e.Share, e.Instance, e.Err)
}

// Unwrap is ErrMountFailed and the mount's error.
func (e *MountError) Unwrap() []error { return []error{ErrMountFailed, e.Err} }

// LiveDevice is a device a part hot-plugs into a running instance, or out
// of it (Detach), through the core (the shares part's live attach and
// detach).
type LiveDevice struct {
	// Spec is the instance's spec with the change, stored and published
	// once the device is in (or out).
	Spec *model.Instance
	// XML is the device element.
	XML []byte
	// Detach: the device goes.
	Detach bool
	// What names the device in errors and warnings ("share data").
	What string
	// Present tells, from the running domain's XML, whether the device is
	// still there: a detach waits (up to the core's detach timeout) until
	// it is not, and warns when the guest has not released it by then.
	Present func(liveXML []byte) bool
}
