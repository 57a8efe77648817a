package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/store"
)

// Reboot, soft and hard, composed from the core's power primitives
// (hostctl/controller, core_devchange.go) and the hypervisor's reboot in
// place. An instance in ERROR (a share that could not be mounted when it
// started: hostctl/parts/faults) leaves it only by a hard reboot whose
// start succeeds.

// Power is the power of an instance's domain as a reboot changes it.
type Power interface {
	// PreStart runs the parts' work before the lock of a start for op
	// (passthrough claims healed).
	PreStart(ctx context.Context, op part.Op, name string) error
	// PowerOff powers the running domain of rec off, as a stop leaves it.
	PowerOff(ctx context.Context, rec store.Instance) error
	// Resume starts the domain of rec, not running, as Start does; a
	// share that cannot be mounted puts the instance in ERROR.
	Resume(ctx context.Context, rec store.Instance) error
	Start(ctx context.Context, name string) (*controller.Instance, error)
	Stop(ctx context.Context, name string, timeout time.Duration) (*controller.Instance, error)
}

// InPlace is a hypervisor that reboots a running domain in place
// (libvirt's reboot: the guest reboots, the domain, its mounts and
// devices stay).
type InPlace interface {
	Reboot(ctx context.Context, name string) error
}

// inPlaceOf is the core's hypervisor as it reboots a domain in place,
// nil when it cannot (a soft reboot is then a stop and a start).
func inPlaceOf(c *controller.Controller) InPlace {
	ip, _ := c.Hypervisor().(InPlace)
	return ip
}

// Faults is the part that keeps the faults of instances in ERROR
// (hostctl/parts/faults), found among the core's parts: a hard reboot
// whose start succeeds clears the fault (a soft reboot is refused by the
// part's Check while there is one).
type Faults interface {
	ClearFault(ctx context.Context, uuid, name string) error
}

// noFaults is Faults without such a part: no instance is in ERROR.
type noFaults struct{}

func (noFaults) ClearFault(context.Context, string, string) error { return nil }

// rebooter reboots instances.
type rebooter struct {
	base
	power   Power
	inPlace InPlace // nil: none
	faults  Faults
}

// Reboot reboots an instance. Hard: a running domain is powered off,
// then the instance is started as by Start (shares mounted first), and
// an instance in ERROR leaves it when the start succeeds; a mount that
// fails again keeps it in ERROR. Soft: libvirt's reboot of a running
// domain (the guest reboots; the domain, its mounts and devices stay),
// or, with a hypervisor that has none, a graceful Stop and a Start; one
// that is not running, or in ERROR, is refused (409).
func (o *rebooter) Reboot(ctx context.Context, name string, hard bool) (_ *controller.Instance, err error) {
	defer o.frame.Observe("reboot", time.Now(), &err)
	if !hard {
		return o.softReboot(ctx, name)
	}
	if err := o.power.PreStart(ctx, part.RebootHard, name); err != nil {
		return nil, fmt.Errorf("reboot %s: %w", name, err)
	}
	unlock := o.frame.LockInstance(name)
	rec, running, err := o.target(ctx, part.RebootHard, name)
	if err != nil {
		unlock()
		return nil, err
	}
	if running {
		err = o.power.PowerOff(ctx, rec)
	}
	if err == nil {
		err = o.power.Resume(ctx, rec)
	}
	if err == nil {
		err = o.faults.ClearFault(ctx, rec.UUID, name)
	}
	unlock()
	if err != nil {
		return nil, fmt.Errorf("reboot %s: %w", name, err)
	}
	o.log.Info("instance rebooted", "name", name, "type", types.RebootHard)
	return o.frame.Get(ctx, name)
}

func (o *rebooter) softReboot(ctx context.Context, name string) (*controller.Instance, error) {
	unlock := o.frame.LockInstance(name)
	_, running, err := o.target(ctx, part.RebootSoft, name)
	unlock()
	switch {
	case err != nil:
		return nil, err
	case !running:
		return nil, fmt.Errorf("reboot %s: %w: a soft reboot needs a running instance; start it (or reboot --hard)", name, controller.ErrState)
	}
	if o.inPlace != nil {
		if err := o.inPlace.Reboot(ctx, name); err != nil {
			return nil, fmt.Errorf("reboot %s: %w", name, err)
		}
		o.log.Info("instance rebooted", "name", name, "type", types.RebootSoft)
		return o.frame.Get(ctx, name)
	}
	if _, err := o.power.Stop(ctx, name, 0); err != nil {
		return nil, fmt.Errorf("reboot %s: %w", name, err)
	}
	return o.power.Start(ctx, name)
}

// target is this host's instance name (locked by the caller) for a
// reboot, checked by the parts for op; running: its domain runs.
func (o *rebooter) target(ctx context.Context, op part.Op, name string) (store.Instance, bool, error) {
	rec, _, err := instance(ctx, o.frame, "reboot", op, name, withHypervisor)
	if err != nil {
		return store.Instance{}, false, err
	}
	cur, err := o.frame.CurrentDomain(ctx, name, rec.UUID)
	if err != nil {
		return store.Instance{}, false, fmt.Errorf("reboot %s: %w", name, err)
	}
	return rec, cur.Running, nil
}
