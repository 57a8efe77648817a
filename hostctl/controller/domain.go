package controller

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vmeta/vmeta/hostctl/layout"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// Domains is the lifecycle of libvirt domains, as the controller drives
// it.
type Domains interface {
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
}

// applyDomain is ApplyInstance with a hypervisor. Everything that can be
// checked is checked before libvirt or a file is touched: the share
// directories (shares.go), the domain XML (virt.Validate: buses, names,
// serials, paths inside the data directory), how each new disk is made,
// address conflicts, the existing domain and what the spec changes about
// it. Then: disks, define, read the XML back into the instance, DHCP
// leases, render and publish (config drive, store Put). A failure at any
// step undoes the steps before it.
func (c *Controller) applyDomain(ctx context.Context, op part.Op, in *model.Instance, old *model.Instance, expect int64) (_ *Instance, err error) {
	name := in.Name
	st := newSteps(name)
	defer st.log(c.log, "apply steps")
	if old != nil {
		model.CarryOver(old, in)
		if fe := model.SizeChanges(old, in); len(fe) > 0 {
			return nil, fmt.Errorf("apply %s: %w", name, &model.SpecError{Errors: fe})
		}
	}
	dirs, err := c.shareRoot.Dirs(in.Shares)
	if err != nil {
		return nil, fmt.Errorf("apply %s: %w", name, err)
	}
	host := c.host(in)
	host.ShareDirs = dirs
	if err := virt.Validate(in, host, c.dom); err != nil {
		return nil, fmt.Errorf("apply %s: %w", name, err)
	}
	if err := c.checkParts(ctx, op, in, ""); err != nil { // phases.go
		return nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	makeDisks, err := c.disks.Make(ctx, in) // the disks part
	if err != nil {
		return nil, fmt.Errorf("apply %s: %w", name, err)
	}
	cur, err := c.currentDomain(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("apply %s: %w", name, err)
	}
	if cur != nil && cur.uuid != in.UUID {
		return nil, fmt.Errorf("apply %s: %w: libvirt already has a domain %s with uuid %s, which is not this instance's (%s); hostctl does not take it over",
			name, store.ErrConflict, name, cur.uuid, in.UUID)
	}
	var changes []string
	switch {
	case cur == nil:
	case old == nil:
		changes = []string{"the domain exists but hostctl has no record of it"}
	default:
		changes = model.HardwareChanges(old, in)
		if ch, err := c.partsChange(ctx, old, in); err != nil { // phases.go
			return nil, fmt.Errorf("%s %s: %w", op, name, err)
		} else if ch != "" {
			changes = append(changes, ch)
		}
	}
	if cur != nil && cur.running && len(changes) > 0 {
		return nil, fmt.Errorf("apply %s: %w: the domain is running and the spec changes its hardware (%s); "+
			"attach or detach devices with `hostctl instance attach-disk|detach-disk|attach-nic|detach-nic`, or stop the instance first",
			name, ErrState, strings.Join(changes, "; "))
	}

	st.done("check")
	r := revert.New(c.log, "apply "+name)
	defer r.Fail(&err)
	if err := c.mkdirInstance(r, c.instanceDir(name)); err != nil {
		return nil, fmt.Errorf("apply %s: %w", name, err)
	}
	redefine := cur == nil || len(changes) > 0
	// Every disk is made before the domain is defined (the plain ones at
	// once): a hostctl killed while qemu-img runs leaves no domain behind
	// for files that never were (test/e2e TestDeviceKilledBetweenClaimAndDomain).
	// Secrets of disks made anew (a rebuild's root disk) go once the new
	// ones are committed.
	disksCommitted, err := makeDisks(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("apply %s: %w", name, err)
	}
	st.done("disks")
	if redefine {
		if err := c.disks.Sources(ctx, in, &host); err != nil {
			return nil, fmt.Errorf("apply %s: %w", name, err)
		}
		// The parts' contributions: their devices, and the firmware
		// entries of the revision the publish below makes (it writes
		// their files once it has rendered them from the addresses the
		// define gives: the domain is defined once).
		if err := c.preparePartsFor(ctx, op, r, in, max(expect, 0)+1, &host); err != nil {
			return nil, fmt.Errorf("%s %s: %w", op, name, err)
		}
		doc, err := virt.BuildDomain(in, host, c.dom)
		if err != nil {
			return nil, fmt.Errorf("apply %s: %w", name, err)
		}
		if _, err := c.domains.Define(ctx, doc); err != nil {
			return nil, fmt.Errorf("apply %s: %w", name, err)
		}
		if cur == nil {
			r.Add("remove domain "+name, func(ctx context.Context) error { return c.domains.Remove(ctx, name) })
		} else {
			prev := cur.inactive
			r.Add("restore the definition of domain "+name, func(ctx context.Context) error {
				_, err := c.domains.Define(ctx, prev)
				return err
			})
		}
	}
	st.done("define")
	if redefine || cur.running {
		if err := c.ReadBack(ctx, in); err != nil {
			return nil, fmt.Errorf("apply %s: %w", name, err)
		}
	} else if err := cur.devs.Apply(in); err != nil {
		// Nothing was defined and the domain is off: the persistent
		// definition read at the check is what a read back would read.
		return nil, fmt.Errorf("apply %s: read back domain %s: %w", name, name, err)
	}
	st.done("read_back")
	if err := c.parts.Defined(ctx, op, &part.Instance{Spec: in, Old: old}, r); err != nil {
		return nil, fmt.Errorf("apply %s: %w", name, err)
	}
	st.done("parts")
	inst, err := c.publish(ctx, r, in, expect)
	if err != nil {
		return nil, err
	}
	st.done("publish")
	// Committed. Disks the spec no longer has go now.
	if old != nil {
		var gone []string
		for _, d := range old.Disks {
			if !slices.ContainsFunc(in.Disks, func(n model.Disk) bool { return n.Name == d.Name }) {
				c.removeDiskFile(name, d.Name)
				gone = append(gone, d.Name)
			}
		}
		c.disks.Forget(ctx, in, gone)
	}
	disksCommitted(ctx)
	inst.State = c.appliedState(ctx, name)
	st.done("state")
	return inst, nil
}

// ReadBack reads in's defined domain's XML (the running configuration
// when it runs, else the persistent one) and copies the addresses, MACs
// and serials libvirt chose into in; every spec device must be there.
func (c *Controller) ReadBack(ctx context.Context, in *model.Instance) error {
	doc, err := c.domains.XML(ctx, in.Name, true)
	if err != nil {
		return err
	}
	devs, err := virt.ParseDevices(doc)
	if err != nil {
		return err
	}
	if err := devs.Apply(in); err != nil {
		return fmt.Errorf("read back domain %s: %w", in.Name, err)
	}
	return nil
}

// curDomain is what libvirt has for an instance name.
type curDomain struct {
	uuid     string
	state    virt.State
	running  bool   // any state but shut off
	inactive []byte // the persistent definition
	devs     *virt.Devices
}

// currentDomain returns the domain named name, or nil when libvirt has
// none.
func (c *Controller) currentDomain(ctx context.Context, name string) (*curDomain, error) {
	doc, err := c.domains.XML(ctx, name, false)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	devs, err := virt.ParseDevices(doc)
	if err != nil {
		return nil, err
	}
	st, err := c.domains.State(ctx, name)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &curDomain{uuid: devs.UUID, state: st, running: st != virt.StateShutoff, inactive: doc, devs: devs}, nil
}

// requireDomain returns the instance's domain, or an ErrState error when
// libvirt has none with its name and UUID.
func (c *Controller) requireDomain(ctx context.Context, name, uuid string) (*curDomain, error) {
	cur, err := c.currentDomain(ctx, name)
	if err != nil {
		return nil, err
	}
	if cur == nil || cur.uuid != uuid {
		return nil, fmt.Errorf("%w: instance %s has no libvirt domain (state missing: it was removed outside hostctl); apply its spec again to define it, or delete the instance", ErrState, name)
	}
	return cur, nil
}

// RemoveDomain destroys and undefines in's domain (a missing one, or
// one with another UUID, is left alone); the undo step on r defines it
// again — and starts it, if it ran.
func (c *Controller) RemoveDomain(ctx context.Context, r *revert.Reverter, in *model.Instance) error {
	cur, err := c.currentDomain(ctx, in.Name)
	if err != nil {
		return err
	}
	if cur == nil {
		return nil
	}
	if cur.uuid != in.UUID {
		c.log.Warn("libvirt's domain of this name is not the instance's; left alone", "name", in.Name, "domain_uuid", cur.uuid, "instance_uuid", in.UUID)
		return nil
	}
	if err := c.domains.Remove(ctx, in.Name); err != nil {
		return err
	}
	prev, wasRunning := cur.inactive, cur.running
	r.Add("redefine domain "+in.Name, func(ctx context.Context) error {
		if _, err := c.domains.Define(ctx, prev); err != nil {
			return err
		}
		if wasRunning {
			return c.domains.Start(ctx, in.Name)
		}
		return nil
	})
	return nil
}

// domainState is the state shown for an instance: libvirt's, or
// StateMissing, or StateUnknown when libvirtd does not answer. Two calls,
// whatever the number of domains.
func (c *Controller) domainState(ctx context.Context, name, uuid string) string {
	cur, err := c.currentDomain(ctx, name)
	switch {
	case err != nil:
		return StateUnknown
	case cur == nil || cur.uuid != uuid:
		return StateMissing
	}
	return string(cur.state)
}

// appliedState is domainState for the domain an apply has just defined
// or read back under the instance's lock — its UUID the instance's —
// without reading its XML a second time: libvirt's state alone.
func (c *Controller) appliedState(ctx context.Context, name string) string {
	st, err := c.domains.State(ctx, name)
	switch {
	case isNotFound(err):
		return StateMissing
	case err != nil:
		return StateUnknown
	}
	return string(st)
}

func (c *Controller) removeDiskFile(instance, target string) {
	p := filepath.Join(c.instanceDir(instance), layout.DiskFile(model.Disk{Name: target}))
	if err := removeFile(p); err != nil {
		c.log.Warn("could not remove the image of a removed disk", "file", p, "err", err)
	}
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, virt.ErrNotFound) }
