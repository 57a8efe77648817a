package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/vmeta/vmeta/hostctl/part"
	"strings"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/store"
)

// An instance is in ERROR when a start failed because a share it needs
// could not be mounted on the host (the share specification: "the
// instance will be marked as ERROR. Subsequent attempts to start the VM
// will necessitate a hard reboot"). The fault is a store record, so it
// holds across daemon restarts and is seen by every host (an adopting
// host too). A plain start of an instance in ERROR is refused (ErrState,
// 409); Reboot with hard set retries the mounts and clears the fault
// when the start succeeds. A failed unmount on stop does not put the
// instance in ERROR: the instance did stop, the mapping is in error and
// the share reconciler retries the unmount (a mount must not be kept).
//
// When the store cannot take the fault record, the start still fails
// with the mount error joined by that one, and the instance is not in
// ERROR (a plain start retries). When a hard reboot started the domain
// but the fault record could not be removed, the reboot answers that
// error; the instance runs and still shows the fault until a later hard
// reboot clears it.

// ErrMountFailed is wrapped by the error of a part's BeforeStart when a
// share could not be mounted (a *MountError): the start that hit it puts
// the instance in ERROR.
var ErrMountFailed = part.ErrMountFailed

// MountError is the error of a part's BeforeStart when a share could not
// be mounted on the host (hostctl/part).
type MountError = part.MountError

// faultReason is the fault of an instance whose start failed with err.
func faultReason(err error) string {
	if me, ok := errors.AsType[*MountError](err); ok {
		return fmt.Sprintf("share %s could not be mounted on the host (its mapping's error says why)", me.Share)
	}
	return "a share could not be mounted on the host (its mapping's error says why)"
}

// StateError is the state of an instance in ERROR (Instance.State)
// while its domain is not running.
const StateError = "error"

// faultPrefix is the store key prefix of the instance fault records,
// one per instance UUID.
const faultPrefix = "instance-fault/"

func faultKey(uuid string) string { return faultPrefix + strings.ToLower(uuid) }

// fault is the record of an instance in ERROR.
type fault struct {
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
}

// faultOf returns the reason an instance is in ERROR ("" when it is not).
func (c *Controller) faultOf(ctx context.Context, uuid string) (string, error) {
	if c.records == nil || uuid == "" {
		return "", nil
	}
	r, err := c.records.Record(ctx, faultKey(uuid))
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("instance fault: %w", err)
	}
	var f fault
	if err := json.Unmarshal(r.Value, &f); err != nil {
		return "", fmt.Errorf("instance fault %s: %w", r.Key, err)
	}
	return f.Reason, nil
}

// faults returns the reasons of every instance in ERROR, by UUID.
func (c *Controller) faults(ctx context.Context) (map[string]string, error) {
	if c.records == nil {
		return nil, nil
	}
	rs, err := c.records.Records(ctx, faultPrefix)
	if err != nil {
		return nil, fmt.Errorf("instance faults: %w", err)
	}
	out := make(map[string]string, len(rs))
	for _, r := range rs {
		var f fault
		if err := json.Unmarshal(r.Value, &f); err != nil {
			return nil, fmt.Errorf("instance fault %s: %w", r.Key, err)
		}
		out[strings.TrimPrefix(r.Key, faultPrefix)] = f.Reason
	}
	return out, nil
}

// setFault puts an instance in ERROR (reason replaces an earlier one).
func (c *Controller) setFault(ctx context.Context, uuid, name, reason string) error {
	if c.records == nil {
		return nil
	}
	b, err := json.Marshal(fault{Reason: reason, Since: time.Now().UTC()})
	if err == nil {
		_, err = c.records.PutRecord(ctx, faultKey(uuid), b, -1)
	}
	if err != nil {
		c.log.Error("instance not marked ERROR", "name", name, "err", err)
		return fmt.Errorf("the instance could not be marked ERROR: %w", err)
	}
	c.log.Warn("instance in ERROR: a hard reboot is needed", "name", name, "reason", reason)
	return nil
}

// clearFault takes an instance out of ERROR.
func (c *Controller) clearFault(ctx context.Context, uuid, name string) error {
	if c.records == nil {
		return nil
	}
	err := c.records.DeleteRecord(ctx, faultKey(uuid), -1)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("clear the ERROR of %s: %w", name, err)
	}
	if err == nil {
		c.log.Info("instance out of ERROR", "name", name)
	}
	return nil
}

// showFault sets the state and fault of an instance in ERROR whose
// domain is not running (a running domain shows its own state).
func showFault(inst *Instance, reason string) {
	if reason == "" {
		return
	}
	inst.Fault = reason
	switch inst.State {
	case "running", "paused", StateUnknown:
	default:
		inst.State = StateError
	}
}

// errNeedsHardReboot refuses a plain start or soft reboot of an
// instance in ERROR.
func errNeedsHardReboot(op, name, reason string) error {
	return fmt.Errorf("%s %s: %w: the instance is in ERROR, a hard reboot is needed (hostctl instance reboot --hard %s); why: %s", op, name, ErrState, name, reason)
}

// Reboot reboots an instance. Hard: a running domain is powered off,
// then the instance is started as by Start (shares mounted first), and
// an instance in ERROR leaves it when the start succeeds; a mount that
// fails again keeps it in ERROR. Soft: libvirt's reboot of a running
// domain (the guest reboots; the domain, its mounts and devices stay),
// or, with a hypervisor that has none, a graceful Stop and a Start; one
// that is not running, or in ERROR, is refused (409).
func (c *Controller) Reboot(ctx context.Context, name string, hard bool) (_ *Instance, err error) {
	defer c.observe("reboot", time.Now(), &err)
	if !hard {
		return c.softReboot(ctx, name)
	}
	if err := c.preStartParts(ctx, part.RebootHard, name); err != nil { // core_nicspart.go
		return nil, fmt.Errorf("reboot %s: %w", name, err)
	}
	unlock := c.locks.Lock(name)
	rec, cur, err := c.powerTarget(ctx, "reboot", part.RebootHard, name)
	if err != nil {
		unlock()
		return nil, err
	}
	if cur.running {
		err = c.domains.Destroy(ctx, name)
		if err == nil {
			c.afterRecordParts(ctx, "stop", rec) // parts.go
			// The passphrases leave libvirt with the domain, as on
			// stop; the start below defines them again.
			if serr := c.disks.UndefineSecrets(ctx, rec.UUID); serr != nil {
				c.log.Warn("libvirt secrets not removed after power-off; the reconciler retries", "name", name, "err", serr)
			}
		}
	}
	if err == nil {
		err = c.startDomain(ctx, rec)
	}
	if err == nil {
		err = c.clearFault(ctx, rec.UUID, name)
	}
	unlock()
	if err != nil {
		return nil, fmt.Errorf("reboot %s: %w", name, err)
	}
	c.log.Info("instance rebooted", "name", name, "type", types.RebootHard)
	return c.Get(ctx, name)
}

func (c *Controller) softReboot(ctx context.Context, name string) (*Instance, error) {
	unlock := c.locks.Lock(name)
	rec, cur, err := c.powerTarget(ctx, "reboot", part.RebootSoft, name)
	var reason string
	if err == nil {
		reason, err = c.faultOf(ctx, rec.UUID)
	}
	unlock()
	switch {
	case err != nil:
		return nil, err
	case reason != "":
		return nil, errNeedsHardReboot("reboot", name, reason)
	case !cur.running:
		return nil, fmt.Errorf("reboot %s: %w: a soft reboot needs a running instance; start it (or reboot --hard)", name, ErrState)
	}
	if r, ok := c.domains.(rebooter); ok {
		if err := r.Reboot(ctx, name); err != nil {
			return nil, fmt.Errorf("reboot %s: %w", name, err)
		}
		c.log.Info("instance rebooted", "name", name, "type", types.RebootSoft)
		return c.Get(ctx, name)
	}
	if _, err := c.Stop(ctx, name, 0); err != nil {
		return nil, fmt.Errorf("reboot %s: %w", name, err)
	}
	return c.Start(ctx, name)
}

// rebooter is a hypervisor that reboots a running domain in place
// (virt.Conn: libvirt's reboot); without it a soft reboot is a graceful
// Stop and a Start.
type rebooter interface {
	Reboot(ctx context.Context, name string) error
}

// faultFor is the reason of uuid in a map of faults.
func faultFor(faults map[string]string, uuid string) string {
	return faults[strings.ToLower(uuid)]
}

// dropFault removes the fault of a deleted instance (logged on failure:
// a stray fault record names a UUID no instance has).
func (c *Controller) dropFault(ctx context.Context, uuid, name string) {
	if err := c.clearFault(ctx, uuid, name); err != nil {
		c.log.Warn("fault record of a deleted instance left", "name", name, "err", err)
	}
}
