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
// (hostctl/controller, core_devchange.go). An instance in ERROR (a share
// that could not be mounted when it started: hostctl/parts/faults)
// leaves it only by a hard reboot whose start succeeds.

// Power is the power of an instance's domain as a reboot changes it.
type Power interface {
	// PreStart runs the parts' work before the lock of a start for op
	// (passthrough claims healed).
	PreStart(ctx context.Context, op part.Op, name string) error
	// PowerTarget is this host's instance name (locked by the caller)
	// for op, checked by the parts for pop; running: its domain runs.
	PowerTarget(ctx context.Context, op string, pop part.Op, name string) (rec store.Instance, running bool, err error)
	// PowerOff powers the running domain of rec off, as a stop leaves it.
	PowerOff(ctx context.Context, rec store.Instance) error
	// StartDomain starts the domain of rec, not running, as Start does;
	// a share that cannot be mounted puts the instance in ERROR.
	StartDomain(ctx context.Context, rec store.Instance) error
	// RebootDomain reboots the running domain name in place; ok is false
	// when the hypervisor cannot (the reboot is then a stop and a start).
	RebootDomain(ctx context.Context, name string) (ok bool, err error)
	Start(ctx context.Context, name string) (*controller.Instance, error)
	Stop(ctx context.Context, name string, timeout time.Duration) (*controller.Instance, error)
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
	power  Power
	faults Faults
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
	rec, running, err := o.power.PowerTarget(ctx, "reboot", part.RebootHard, name)
	if err != nil {
		unlock()
		return nil, err
	}
	if running {
		err = o.power.PowerOff(ctx, rec)
	}
	if err == nil {
		err = o.power.StartDomain(ctx, rec)
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
	_, running, err := o.power.PowerTarget(ctx, "reboot", part.RebootSoft, name)
	unlock()
	switch {
	case err != nil:
		return nil, err
	case !running:
		return nil, fmt.Errorf("reboot %s: %w: a soft reboot needs a running instance; start it (or reboot --hard)", name, controller.ErrState)
	}
	ok, err := o.power.RebootDomain(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("reboot %s: %w", name, err)
	}
	if ok {
		o.log.Info("instance rebooted", "name", name, "type", types.RebootSoft)
		return o.frame.Get(ctx, name)
	}
	if _, err := o.power.Stop(ctx, name, 0); err != nil {
		return nil, fmt.Errorf("reboot %s: %w", name, err)
	}
	return o.power.Start(ctx, name)
}
