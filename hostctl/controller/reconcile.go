package controller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// Events is libvirt's event stream.
type Events interface {
	// Events delivers domain events and the connection's
	// disconnected/reconnected events; nil when there are none. The
	// controller keeps reading it until it is closed.
	Events() <-chan virt.Event
}

// watch reconciles every instance once, then again after each reconnect
// to libvirtd and every resync interval (libvirt sends no event when only
// a domain's persistent definition changes, e.g. `virsh detach-disk
// --config`), and the instance of every domain event in between. Events
// are read by a goroutine of their own into a set of pending names, so
// delivery never waits for a reconcile (go-libvirt stalls every call
// while an event is not taken).
func (c *Controller) watch(ctx context.Context) {
	var mu sync.Mutex
	all, pending := true, map[string]bool{}
	kick := make(chan struct{}, 1)
	kick <- struct{}{}
	if events := c.events.Events(); events != nil {
		go func() {
			for ev := range events {
				mu.Lock()
				switch {
				case ev.Kind == virt.EventDisconnected:
					c.log.Warn("libvirtd connection lost; reconciling once it is back")
				case ev.Kind == virt.EventReconnected:
					c.log.Info("libvirtd connection back; reconciling every instance")
					all = true
				case ev.Domain != "":
					c.log.Debug("libvirt event", "event", ev.String())
					pending[ev.Domain] = true
				}
				mu.Unlock()
				select {
				case kick <- struct{}{}:
				default:
				}
			}
		}()
	}
	var tick <-chan time.Time
	if c.resync > 0 {
		t := time.NewTicker(c.resync)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-tick:
			mu.Lock()
			all = true
			mu.Unlock()
		}
		mu.Lock()
		doAll, names := all, pending
		all, pending = false, map[string]bool{}
		mu.Unlock()
		if doAll {
			if err := c.Reconcile(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("reconcile", "err", err)
			}
			c.reconciled()
			continue
		}
		for name := range names {
			if err := c.reconcileOne(ctx, name); err != nil && ctx.Err() == nil {
				c.log.Warn("reconcile", "name", name, "err", err)
			}
		}
		c.reconciled()
	}
}

// reconciled calls Options.Reconciled (the key rotation engine runs after
// each reconcile pass: a stopped instance's disks rotate then).
func (c *Controller) reconciled() {
	if c.onReconciled != nil {
		c.onReconciled()
	}
}

// Reconcile brings every instance in line with libvirt: an instance
// whose domain is gone is marked missing (State), and devices removed
// from its domain outside hostctl leave its metadata (republished). It
// never deletes an instance or a device libvirt still has, and changes
// nothing when libvirtd cannot be asked.
func (c *Controller) Reconcile(ctx context.Context) error {
	return c.drv.reconcile(ctx)
}

// reconcileAll is Reconcile with a hypervisor.
func (c *Controller) reconcileAll(ctx context.Context) error {
	recs, err := c.store.Instances(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	var errs []error
	for _, rec := range recs {
		if !c.owns(rec) {
			continue // another host's: its domain is not in this libvirt
		}
		if err := c.reconcileOne(ctx, rec.Name); err != nil {
			errs = append(errs, err)
			if errors.Is(err, virt.ErrUnreachable) {
				break // the reconnect triggers another pass
			}
		}
	}
	if err := c.disks.Sweep(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// reconcileOne reconciles the instance named name (if there is one).
func (c *Controller) reconcileOne(ctx context.Context, name string) (err error) {
	defer c.locks.Lock(name)()
	rec, err := c.store.Instance(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reconcile %s: %w", name, err)
	}
	if !c.owns(rec) {
		return nil
	}
	if st, err := c.states().State(ctx, rec.UUID); err != nil {
		return fmt.Errorf("reconcile %s: %w", name, err)
	} else if st != "" {
		// Shelved (no domain) or rescued (another definition): left
		// alone until unshelve or unrescue (core_vmstate.go).
		return nil
	}
	in, err := decodeSpec(rec)
	if err != nil {
		return err
	}
	doc, err := c.domains.XML(ctx, name, true)
	if isNotFound(err) {
		c.setMissing(name, true)
		return c.disks.UndefineSecrets(ctx, rec.UUID)
	}
	if err != nil {
		return fmt.Errorf("reconcile %s: %w", name, err)
	}
	devs, err := virt.ParseDevices(doc)
	if err != nil {
		return fmt.Errorf("reconcile %s: %w", name, err)
	}
	if devs.UUID != rec.UUID {
		c.setMissing(name, true)
		return c.disks.UndefineSecrets(ctx, rec.UUID)
	}
	c.setMissing(name, false)
	if len(c.parts) > 0 {
		// A guest that powered itself off: the parts are told it stopped
		// (the share mappings go inactive, their host mounts released);
		// their AfterStop does nothing for one already told.
		if st, err := c.domains.State(ctx, name); err == nil && st == virt.StateShutoff {
			c.afterRecordParts(ctx, "stop", rec) // parts.go
		}
	}
	// A domain that went off by itself (the guest powered off) no longer
	// needs its passphrases in libvirt (the disks part is among the parts).
	if len(c.parts) > 0 {
		if st, err := c.domains.State(ctx, name); err == nil && st == virt.StateShutoff {
			if err := c.disks.UndefineSecrets(ctx, rec.UUID); err != nil {
				return fmt.Errorf("reconcile %s: %w", name, err)
			}
		}
	}

	next := in.Clone()
	var gone []string
	next.Disks = slices.DeleteFunc(next.Disks, func(d model.Disk) bool {
		_, ok := devs.Disk(d.Name)
		if !ok {
			gone = append(gone, "disk "+d.Name)
		}
		return !ok
	})
	next.NICs = slices.DeleteFunc(next.NICs, func(n model.NIC) bool {
		_, ok := devs.NIC(n.MAC)
		if !ok {
			gone = append(gone, "NIC "+n.MAC)
		}
		return !ok
	})
	next.Shares = slices.DeleteFunc(next.Shares, func(s model.Share) bool {
		_, ok := devs.Share(s.EffectiveTag())
		if !ok {
			gone = append(gone, "share "+s.EffectiveTag())
		}
		return !ok
	})
	if err := devs.Apply(next); err != nil {
		return fmt.Errorf("reconcile %s: %w", name, err)
	}
	driftedPart, drifted := "", ""
	if reflect.DeepEqual(next, in) {
		if driftedPart, drifted = c.partsDrifted(ctx, in, rec.Revision); drifted == "" { // core_firmwarepart.go
			return nil
		}
	}
	r := revert.New(c.log, "reconcile "+name)
	defer r.Fail(&err)
	if err := c.definedParts(ctx, part.Apply, r, in, next); err != nil { // core_nicspart.go
		return fmt.Errorf("reconcile %s: %w", name, err)
	}
	if _, err := c.publish(ctx, r, next, rec.Revision); err != nil {
		return fmt.Errorf("reconcile %s: %w", name, err)
	}
	switch {
	case drifted != "":
		// The part's reason ("firmware entries did not match
		// --firmware-metadata (…)") is the message.
		c.log.Info(drifted+"; republished (effective at the next boot)", "name", name, "part", driftedPart)
	case len(gone) > 0:
		c.log.Warn("devices removed outside hostctl; dropped from the metadata", "name", name, "devices", strings.Join(gone, ", "))
	default:
		c.log.Info("device addresses changed outside hostctl; metadata republished", "name", name)
	}
	return nil
}
