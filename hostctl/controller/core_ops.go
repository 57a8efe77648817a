package controller

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// What the operations of hostctl/ops (shelve, unshelve, rescue,
// unrescue, resize, rebuild, snapshot, reboot, the device changes) ask
// of the core: the frame of an operation (its lock: LockInstance,
// observation, events), this host's instance checked by the parts, its
// files, its domain defined, started, stopped and removed, its metadata
// published, and the parts' Prepare phase. The core does not know the
// operations; the daemon wires them (hostctl/daemon, adminapi.go).

// Domain is an instance's libvirt domain as an operation finds it.
type Domain struct {
	UUID     string     // its UUID
	Running  bool       // any state but shut off
	State    virt.State // its state
	Inactive []byte     // the persistent definition
}

// Logger is the core's logger.
func (c *Controller) Logger() *slog.Logger { return c.log }

// DataDir is the data directory; InstanceDir an instance's directory in
// it.
func (c *Controller) DataDir() string { return c.dataDir }

// Documents are the instances' published documents (the core's store).
func (c *Controller) Documents() store.Documents { return c.store }

// InstanceDir is the directory of instance name's files.
func (c *Controller) InstanceDir(name string) string { return c.instanceDir(name) }

// OpInstance returns the record and spec of this host's instance name,
// checked by the parts for op (a refusal wraps ErrState); what names the
// operation in errors ("attach disk to"). Whether the operation needs a
// hypervisor, or its domain in some state, is the operation's to check.
func (c *Controller) OpInstance(ctx context.Context, what string, op part.Op, name string) (store.Instance, *model.Instance, error) {
	rec, err := c.OwnRecord(ctx, what, name)
	if err != nil {
		return store.Instance{}, nil, err
	}
	in, err := decodeSpec(rec)
	if err != nil {
		return store.Instance{}, nil, err
	}
	if err := c.checkParts(ctx, op, in, ""); err != nil { // phases.go
		return store.Instance{}, nil, fmt.Errorf("%s %s: %w", what, name, err)
	}
	return rec, in, nil
}

// PrepareParts runs the parts' Prepare phase for op on in, with the undo
// steps on r, and hands their devices to the domain host will build.
func (c *Controller) PrepareParts(ctx context.Context, op part.Op, r *revert.Reverter, in *model.Instance, host *virt.Host) error {
	return c.preparePartsFor(ctx, op, r, in, 0, host) // phases.go
}

// DomainHost is the host side of in's domain (files, encrypted disks'
// sources) and the options domains are built with.
func (c *Controller) DomainHost(ctx context.Context, in *model.Instance) (virt.Host, virt.Options, error) {
	host := c.host(in)
	if err := c.disks.Sources(ctx, in, &host); err != nil {
		return virt.Host{}, virt.Options{}, err
	}
	return host, c.dom, nil
}

// CurrentDomain returns the domain named name, nil when libvirt has
// none; with uuid, an ErrState error when libvirt has none of that name
// and UUID.
func (c *Controller) CurrentDomain(ctx context.Context, name, uuid string) (*Domain, error) {
	var cur *curDomain
	var err error
	if uuid != "" {
		cur, err = c.requireDomain(ctx, name, uuid)
	} else {
		cur, err = c.currentDomain(ctx, name)
	}
	if err != nil || cur == nil {
		return nil, err
	}
	return &Domain{UUID: cur.uuid, Running: cur.running, State: cur.state, Inactive: cur.inactive}, nil
}

// DefineDomain defines the domain doc of instance name; the undo step on
// r defines prev again, or removes the domain when prev is nil.
func (c *Controller) DefineDomain(ctx context.Context, r *revert.Reverter, name string, doc, prev []byte) error {
	if c.domains == nil {
		return fmt.Errorf("%w: this host runs without a hypervisor (--virt none)", ErrState)
	}
	if _, err := c.domains.Define(ctx, doc); err != nil {
		return err
	}
	if prev == nil {
		r.Add("remove domain "+name, func(ctx context.Context) error { return c.domains.Remove(ctx, name) })
	} else {
		r.Add("redefine domain "+name, func(ctx context.Context) error { _, err := c.domains.Define(ctx, prev); return err })
	}
	return nil
}

// Publish publishes in, expecting the record's revision expect; the undo
// step on r restores what was published.
func (c *Controller) Publish(ctx context.Context, r *revert.Reverter, in *model.Instance, expect int64) error {
	_, err := c.publish(ctx, r, in, expect)
	return err
}

// ApplyFor applies in over old (its stored spec, revision expect) for
// op: disks made, domain defined, published; the parts see op.
func (c *Controller) ApplyFor(ctx context.Context, op part.Op, in, old *model.Instance, expect int64) (*Instance, error) {
	return c.drv.apply(ctx, op, in, old, expect)
}

// StopDomain leaves the domain of rec stopped with no libvirt secret: when
// running, it is shut down (powered off after timeout; at once when
// timeout is negative) and the undo step on r starts it again (again, or
// as start does with its passphrases when again is nil); then the
// libvirt secrets of its disks are undefined.
func (c *Controller) StopDomain(ctx context.Context, r *revert.Reverter, rec store.Instance, running bool, timeout time.Duration, again func(context.Context) error) error {
	if running {
		if timeout < 0 {
			if err := c.domains.Destroy(ctx, rec.Name); err != nil {
				return err
			}
		} else if _, err := c.shutdown(ctx, rec.Name, timeout); err != nil {
			return err
		}
		if again == nil {
			again = func(ctx context.Context) error { return c.startWithSecrets(ctx, rec) }
		}
		r.Add("start "+rec.Name+" again", again)
	}
	return c.disks.UndefineSecrets(ctx, rec.UUID)
}

// Boot starts the domain of rec, not running, as the operation defined
// it: config drive, passphrases of in's disks, extra (the operation's own
// secrets), start. The undo steps go on r.
func (c *Controller) Boot(ctx context.Context, r *revert.Reverter, rec store.Instance, in *model.Instance, extra func(context.Context, *revert.Reverter) error) error {
	if err := c.EnsureDrive(ctx, rec); err != nil {
		return err
	}
	if err := c.disks.DefineSecrets(ctx, r, in); err != nil {
		return err
	}
	if extra != nil {
		if err := extra(ctx, r); err != nil {
			return err
		}
	}
	return c.domains.Start(ctx, rec.Name)
}

// Capabilities reports whether this host has a hypervisor and whether
// its store keeps records (block devices, instance states).
func (c *Controller) Capabilities() (hypervisor, records bool) {
	return c.domains != nil, c.records != nil
}

// Host ownership as the adopt and the forced delete of another host's
// instance (hostctl/ops, adopt.go and forcedelete.go) ask it of the core
// (hosts.go): whose the record is, whether its owner is alive, the
// record's host field changed in one compare-and-swap or the record
// dropped, and the parts' phases for a stored instance of any host.

// Owns reports whether rec is this host's to manage (a record without a
// host is anyone's).
func (c *Controller) Owns(rec store.Instance) bool { return c.owns(rec) }

// OwnerDown returns nil when rec's host is down, else ErrOwnerAlive; what
// names the refused operation ("adopt web-1").
func (c *Controller) OwnerDown(ctx context.Context, what string, rec store.Instance) error {
	if rec.Host == "" {
		return nil
	}
	if c.hosts == nil {
		return fmt.Errorf("%s: %w: this hostctl does not track hosts, so it cannot tell whether %s is down", what, ErrOwnerAlive, rec.Host)
	}
	down, why, err := c.hosts.HostDown(ctx, rec.Host)
	if err != nil {
		return fmt.Errorf("%s: owner %s: %w", what, rec.Host, err)
	}
	if !down {
		return fmt.Errorf("%s: %w: %s lives on %s, whose heartbeat is fresh (%s)", what, ErrOwnerAlive, rec.Name, rec.Host, why)
	}
	return nil
}

// TakeOver makes this host the owner of rec, read at rec.Revision: one
// compare-and-swap of its record (store.ErrConflict when it changed
// since, so of two hosts taking it over at once exactly one wins); the
// metadata's readers are told. It returns the record as written.
func (c *Controller) TakeOver(ctx context.Context, rec store.Instance) (store.Instance, error) {
	doc, err := c.store.Document(ctx, rec.UUID)
	if err != nil {
		return store.Instance{}, err
	}
	rec.Host = c.hostName
	if _, _, err := c.store.Put(ctx, rec, doc, rec.Revision); err != nil {
		return store.Instance{}, err
	}
	if c.notify != nil {
		c.notify.Invalidate(rec.UUID)
	}
	return rec, nil
}

// Forget removes rec, another host's instance, from the store (its
// record and published metadata), touching nothing on any host; the parts
// that act on a forced delete run AfterDelete for its owner, and the
// metadata's readers are told.
func (c *Controller) Forget(ctx context.Context, rec store.Instance) error {
	if err := c.store.Delete(ctx, rec.Name); err != nil {
		return err
	}
	c.afterStoredParts(ctx, "delete", rec, part.ForceDelete) // phases.go
	if c.notify != nil {
		c.notify.Invalidate(rec.UUID)
	}
	return nil
}

// CommittedRecordParts tells the parts that act on op that op on rec, a
// stored instance of any host, stands, and returns their notes.
func (c *Controller) CommittedRecordParts(ctx context.Context, op part.Op, rec store.Instance) []string {
	in, err := decodeSpec(rec)
	if err != nil {
		c.log.Warn("parts not told that "+string(op)+" stands", "instance", rec.Name, "err", err)
		return nil
	}
	return c.parts.Committed(ctx, op, &part.Instance{Spec: in, Host: rec.Host})
}
