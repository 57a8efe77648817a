package controller

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// driver is everything the controller does differently with a hypervisor
// (libvirtDriver) and without one (noDriver, hostctl serve --virt none).
// New picks one; no other code asks which mode the controller runs in.
type driver interface {
	// apply creates or updates the instance in (old is its stored spec,
	// nil for a new one) and publishes it, expecting revision expect.
	// op is the operation (apply, resize, rebuild) the parts see.
	apply(ctx context.Context, op part.Op, in, old *model.Instance, expect int64) (*Instance, error)
	// remove takes down what an instance has besides its record and files
	// (its domain, what the parts have for it: DHCP leases), registering
	// the undo steps on r.
	remove(ctx context.Context, r *revert.Reverter, rec store.Instance) error
	// state is the state shown for an instance ("" when there is none).
	state(ctx context.Context, name, uuid string) string
	// require refuses a request (op on instance name) the mode cannot do.
	require(op, name string) error
}

// noDriver: no hypervisor. Addresses come from the spec; power,
// hot-plug are refused or have nothing to do.
type noDriver struct{ c *Controller }

func (d noDriver) apply(ctx context.Context, op part.Op, in, _ *model.Instance, expect int64) (_ *Instance, err error) {
	if err := d.c.checkParts(ctx, op, in, ""); err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, in.Name, err)
	}
	r := revert.New(d.c.log, "apply "+in.Name)
	defer r.Fail(&err)
	inst, err := d.c.publish(ctx, r, in, expect)
	if err != nil {
		return nil, err
	}
	// No hypervisor, no disks: a disk requested encrypted is published
	// as not encrypted, and the caller is told why.
	for _, dk := range in.Disks {
		if dk.Encrypted {
			inst.Warnings = append(inst.Warnings, fmt.Sprintf("disk %s: encryption requested, but without a hypervisor (--virt none) hostctl creates no disks: the guest is told \"encrypted\": false", dk.Name))
		}
	}
	return inst, nil
}

func (noDriver) remove(context.Context, *revert.Reverter, store.Instance) error { return nil }
func (noDriver) state(context.Context, string, string) string                   { return "" }
func (noDriver) require(op, name string) error {
	return fmt.Errorf("%s %s: %w", op, name, ErrNoHypervisor)
}

// libvirtDriver: instances are libvirt domains (domain.go; hostctl/reconcile
// keeps them in line with libvirt).
type libvirtDriver struct{ c *Controller }

func (d libvirtDriver) apply(ctx context.Context, op part.Op, in, old *model.Instance, expect int64) (*Instance, error) {
	return d.c.applyDomain(ctx, op, in, old, expect)
}

func (d libvirtDriver) remove(ctx context.Context, r *revert.Reverter, rec store.Instance) error {
	in, err := decodeSpec(rec)
	if err != nil {
		return err
	}
	if err := d.c.RemoveDomain(ctx, r, in); err != nil {
		return err
	}
	return d.c.parts.Remove(ctx, part.Delete, &part.Instance{Spec: in}, r)
}

func (d libvirtDriver) state(ctx context.Context, name, uuid string) string {
	return d.c.domainState(ctx, name, uuid)
}

func (libvirtDriver) require(string, string) error { return nil }
