package controller

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// What the operations of hostctl/ops (shelve, unshelve, rescue,
// unrescue, resize, rebuild, snapshot) ask of the core: the frame of an
// operation (lock, observation, events), the instance an operation acts
// on, its state record, its block devices and disks, its domain and
// power, its secrets, and the parts' phases. The core does not know the
// operations; the daemon wires them (hostctl/daemon, adminapi.go).

// ShelvedImageName is the catalog image a shelve of instance name makes.
func ShelvedImageName(name string) string { return name + "-shelved" }

// The --encryption-key choices of a snapshot.
const (
	SnapshotKeySame     = "same"
	SnapshotKeyNew      = "new"
	SnapshotKeyExisting = "existing"
	SnapshotKeyNone     = "none"
)

// Key deletion policies of an encrypted image (os_encrypt_key_deletion_policy).
const (
	KeyDeletionOnImageDeletion = "on_image_deletion"
	KeyDeletionDoNotDelete     = "do_not_delete"
)

// SnapshotRequest is an instance snapshot's parameters (EncryptionKey
// same when empty).
type SnapshotRequest = types.SnapshotRequest

// RescueRequest is a rescue's parameters.
type RescueRequest = types.RescueRequest

// RescueDisk is the block-device record key and the libvirt secret usage
// suffix of a rescue disk (no disk name: a target name has no
// underscore); RescueFile its image file in the instance's directory.
const (
	RescueDisk = rescueDisk
	RescueFile = "disk.rescue"
)

// rescueDisk is the block-device record key of the rescue disk (the
// disks part's secret rule counts its secret in use: disks.RescueDisk).
const rescueDisk = "_rescue"

// Domain is an instance's libvirt domain as an operation finds it.
type Domain struct {
	UUID     string     // its UUID
	Running  bool       // any state but shut off
	State    virt.State // its state
	Inactive []byte     // the persistent definition
}

// Observe tells Options.Observe that op, begun at start, ended with
// *err (deferred first thing by an operation).
func (c *Controller) Observe(op string, start time.Time, err *error) { c.observe(op, start, err) }

// Emit records an event on the audit log's stream.
func (c *Controller) Emit(ctx context.Context, stream, typ string, payload any) {
	c.emit(ctx, stream, typ, payload)
}

// Logger is the core's logger.
func (c *Controller) Logger() *slog.Logger { return c.log }

// DataDir is the data directory; InstanceDir an instance's directory in
// it.
func (c *Controller) DataDir() string { return c.dataDir }

// InstanceDir is the directory of instance name's files.
func (c *Controller) InstanceDir(name string) string { return c.instanceDir(name) }

// Need is the state an operation needs its instance in.
type Need int

const (
	// NeedStopped: its domain shut off (and as the parts' Check allow:
	// neither shelved nor rescued, its shares agreeing).
	NeedStopped Need = iota
	// NeedNoState: on a host with a hypervisor (the parts' Check refuse a
	// shelved or rescued one).
	NeedNoState
	// NeedAnyState: on a host with a hypervisor (the parts' Check allow
	// the state the operation ends: unshelve, unrescue).
	NeedAnyState
)

// OpInstance returns the record and spec of this host's instance name
// for op, refused (ErrState) when it is not as op needs; the parts' Check
// phase sees op.
func (c *Controller) OpInstance(ctx context.Context, op part.Op, name string, need Need) (store.Instance, *model.Instance, error) {
	var rec store.Instance
	var in *model.Instance
	var err error
	if need == NeedStopped {
		return c.stoppedInstance(ctx, string(op), name) // the parts' Check included
	}
	rec, in, err = c.ownInstance(ctx, string(op), name)
	if err != nil {
		return store.Instance{}, nil, err
	}
	if err := c.checkParts(ctx, op, in); err != nil { // parts.go
		return store.Instance{}, nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	return rec, in, nil
}

// ownInstance is this host's instance name for op, on a host with a
// hypervisor.
func (c *Controller) ownInstance(ctx context.Context, op, name string) (store.Instance, *model.Instance, error) {
	rec, err := c.ownRecord(ctx, op, name)
	if err != nil {
		return store.Instance{}, nil, err
	}
	if err := c.drv.require(op, name); err != nil {
		return store.Instance{}, nil, err
	}
	in, err := decodeSpec(rec)
	if err != nil {
		return store.Instance{}, nil, err
	}
	return rec, in, nil
}

// PrepareParts runs the parts' Prepare phase for op on in, with the undo
// steps on r, and hands their devices to the domain host will build.
func (c *Controller) PrepareParts(ctx context.Context, op part.Op, r *revert.Reverter, in *model.Instance, host *virt.Host) error {
	return c.prepareParts(ctx, op, r, in, host)
}

// SetAside renames file p out of the way of its replacement; the undo
// step on r puts it back.
func (c *Controller) SetAside(r *revert.Reverter, p string) (string, error) { return c.setAside(r, p) }

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

// RemoveDomain destroys and undefines in's domain; the undo step on r
// defines (and starts) it again.
func (c *Controller) RemoveDomain(ctx context.Context, r *revert.Reverter, in *model.Instance) error {
	return c.removeDomain(ctx, r, in)
}

// ReadBack reads what libvirt chose for in's defined domain back into
// in.
func (c *Controller) ReadBack(ctx context.Context, in *model.Instance) error {
	_, err := c.readBack(ctx, in)
	return err
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
	if err := c.ensureDrive(ctx, rec); err != nil {
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

// ReleaseHost takes what the stopped instance in, shelved, still has on
// the host besides its domain, its files and what the parts gave back
// (part.Shelve: the shares' host mounts, passthrough devices; the
// config-drive media went at the stop): its libvirt secrets (a stopped domain's
// passphrases are not in libvirt: any left by a crash go now; failures
// are logged, the reconciler retries).
func (c *Controller) ReleaseHost(ctx context.Context, in *model.Instance) {
	if err := c.disks.UndefineSecrets(ctx, in.UUID); err != nil {
		c.log.Warn("libvirt secrets of a shelved instance not undefined (the reconciler retries)", "name", in.Name, "err", err)
	}
}

// stoppedInstance returns the record and spec of this host's instance
// name for op, refusing (ErrState) one whose domain is not shut off,
// and one the parts refuse op for.
func (c *Controller) stoppedInstance(ctx context.Context, op, name string) (store.Instance, *model.Instance, error) {
	rec, err := c.ownRecord(ctx, op, name)
	if err != nil {
		return store.Instance{}, nil, err
	}
	if err := c.checkRecordParts(ctx, part.Op(op), rec); err != nil { // parts.go (shares refuse a resize or rebuild; a shelved or rescued instance is refused)
		return store.Instance{}, nil, err
	}
	old, err := decodeSpec(rec)
	if err != nil {
		return store.Instance{}, nil, err
	}
	if c.domains != nil {
		cur, err := c.requireDomain(ctx, name, rec.UUID)
		if err != nil {
			return store.Instance{}, nil, fmt.Errorf("%s %s: %w", op, name, err)
		}
		if cur.running {
			return store.Instance{}, nil, fmt.Errorf("%s %s: %w: the instance is %s; stop it first", op, name, ErrState, cur.state)
		}
	}
	return rec, old, nil
}

// setAside renames a disk file out of the way of its replacement and
// registers putting it back.
func (c *Controller) setAside(r *revert.Reverter, p string) (string, error) {
	a := p + ".old"
	if err := os.Rename(p, a); err != nil {
		return "", err
	}
	r.Add("put "+p+" back", func(context.Context) error {
		if err := removeFile(p); err != nil {
			return err
		}
		return os.Rename(a, p)
	})
	return a, nil
}

// Capabilities reports whether this host has a hypervisor and whether
// its store keeps records (block devices, instance states).
func (c *Controller) Capabilities() (hypervisor, records bool) {
	return c.domains != nil, c.records != nil
}

// ErrNoRecords: the store keeps no records (flavors, block devices,
// states).
var ErrNoRecords = errNoRecords
