// Package faults is the part that keeps the faults of instances in
// ERROR (issue 22: a part; the shares specification: "the instance will
// be marked as ERROR. Subsequent attempts to start the VM will
// necessitate a hard reboot").
//
// An instance is in ERROR when a start failed because a share it needs
// could not be mounted on the host (part.ErrMountFailed). The fault is a
// store record, one per instance UUID, so it holds across daemon
// restarts and is seen by every host (an adopting host too). While it is
// recorded a plain start and a soft reboot are refused (Check: ErrState,
// 409, asking for a hard reboot); a hard reboot (hostctl/ops) retries the
// mounts and clears the fault when the start succeeds; the record goes
// with the instance (AfterDelete, for a delete and a force-delete). A
// failed unmount on stop does not put the instance in ERROR: the
// instance did stop, the mapping is in error and the share reconciler
// retries the unmount.
//
// When the store cannot take the fault record, the start still fails
// with the mount error joined by that one, and the instance is not in
// ERROR (a plain start retries). When a hard reboot started the domain
// but the record could not be removed, the reboot answers that error; the
// instance runs and still shows the fault until a later hard reboot
// clears it.
//
// The core (hostctl/controller) records a fault through StartFailed and
// shows faults (Fault, Faults) in what Get, List and the metrics answer;
// the reboot of hostctl/ops clears one (ClearFault). The daemon registers
// the part.
package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// Records is where the fault records are kept (the store's records).
type Records interface {
	Record(ctx context.Context, key string) (store.Record, error)
	Records(ctx context.Context, prefix string) ([]store.Record, error)
	PutRecord(ctx context.Context, key string, value []byte, expectVersion int64) (store.Record, error)
	DeleteRecord(ctx context.Context, key string, expectVersion int64) error
}

// Prefix is the store key prefix of the fault records, one per instance
// UUID (lower case).
const Prefix = "instance-fault/"

func key(uuid string) string { return Prefix + strings.ToLower(uuid) }

// record is the stored fault of an instance in ERROR.
type record struct {
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
}

// Part keeps the fault records. Without records (a store that keeps
// none) no instance is ever in ERROR.
type Part struct {
	records Records
	log     *slog.Logger
}

var _ part.Part = (*Part)(nil)

// New returns the part over records (nil: none).
func New(records Records, log *slog.Logger) *Part {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Part{records: records, log: log}
}

// Name is "faults".
func (p *Part) Name() string { return "faults" }

// needsHardReboot is why a plain start or a soft reboot of an instance in
// ERROR is refused.
const needsHardReboot = "an instance in ERROR starts again only by a hard reboot"

// Answers: a plain start and a soft reboot are refused while a fault is
// recorded; a hard reboot clears it; the record goes with the instance.
func (p *Part) Answers() part.Answers {
	a := part.Answers{}
	for _, op := range part.Ops() {
		a[op] = part.Answer{Do: part.Nothing}
	}
	a[part.Start] = part.Answer{Do: part.Refuse, Why: needsHardReboot}
	a[part.RebootSoft] = part.Answer{Do: part.Refuse, Why: needsHardReboot}
	a[part.RebootHard] = part.Answer{Do: part.Act, Why: "a start that succeeds takes the instance out of ERROR (hostctl/ops, reboot.go)"}
	a[part.Delete] = part.Answer{Do: part.Act, Why: "the fault record goes with the instance"}
	a[part.ForceDelete] = part.Answer{Do: part.Act, Why: "the fault record goes with the instance"}
	return a
}

// Check refuses a plain start and a soft reboot of an instance in ERROR
// (part.ErrState), asking for a hard reboot and saying why.
func (p *Part) Check(ctx context.Context, op part.Op, in *part.Instance) error {
	if op != part.Start && op != part.RebootSoft {
		return nil
	}
	reason, err := p.Fault(ctx, in.Spec.UUID)
	if err != nil || reason == "" {
		return err
	}
	return fmt.Errorf("%w: the instance is in ERROR, a hard reboot is needed (hostctl instance reboot --hard %s); why: %s", part.ErrState, in.Spec.Name, reason)
}

// Prepare contributes nothing.
func (p *Part) Prepare(context.Context, part.Op, *part.Instance, *revert.Reverter, *part.Contribution) error {
	return nil
}

// Devices: the part gives no device.
func (p *Part) Devices(*part.Instance) ([]part.Device, error) { return nil, nil }

// AfterStart does nothing: the hard reboot clears the fault itself, and
// answers when it cannot.
func (p *Part) AfterStart(context.Context, *part.Instance) error { return nil }

// AfterStop does nothing: a failed unmount does not put the instance in
// ERROR.
func (p *Part) AfterStop(context.Context, *part.Instance) error { return nil }

// AfterDelete removes the fault of a deleted instance (a stray record
// names a UUID no instance has).
func (p *Part) AfterDelete(ctx context.Context, in *part.Instance) error {
	return p.ClearFault(ctx, in.Spec.UUID, in.Spec.Name)
}

// StartFailed puts the instance in ERROR when its start failed with err
// because a share could not be mounted; the error says why the instance
// could not be marked.
func (p *Part) StartFailed(ctx context.Context, in *part.Instance, err error) error {
	if !errors.Is(err, part.ErrMountFailed) {
		return nil
	}
	return p.SetFault(ctx, in.Spec.UUID, in.Spec.Name, reason(err))
}

// reason is the fault of an instance whose start failed with err: the
// share only (the mount's own words stay in the mapping's error).
func reason(err error) string {
	if me, ok := errors.AsType[*part.MountError](err); ok {
		return fmt.Sprintf("share %s could not be mounted on the host (its mapping's error says why)", me.Share)
	}
	return "a share could not be mounted on the host (its mapping's error says why)"
}

// Fault returns the reason the instance uuid is in ERROR ("" when it is
// not).
func (p *Part) Fault(ctx context.Context, uuid string) (string, error) {
	if p.records == nil || uuid == "" {
		return "", nil
	}
	r, err := p.records.Record(ctx, key(uuid))
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("instance fault: %w", err)
	}
	var f record
	if err := json.Unmarshal(r.Value, &f); err != nil {
		return "", fmt.Errorf("instance fault %s: %w", r.Key, err)
	}
	return f.Reason, nil
}

// Faults returns the reasons of every instance in ERROR, by UUID (lower
// case).
func (p *Part) Faults(ctx context.Context) (map[string]string, error) {
	if p.records == nil {
		return nil, nil
	}
	rs, err := p.records.Records(ctx, Prefix)
	if err != nil {
		return nil, fmt.Errorf("instance faults: %w", err)
	}
	out := make(map[string]string, len(rs))
	for _, r := range rs {
		var f record
		if err := json.Unmarshal(r.Value, &f); err != nil {
			return nil, fmt.Errorf("instance fault %s: %w", r.Key, err)
		}
		out[strings.TrimPrefix(r.Key, Prefix)] = f.Reason
	}
	return out, nil
}

// SetFault puts the instance uuid (named name) in ERROR; reason replaces
// an earlier one.
func (p *Part) SetFault(ctx context.Context, uuid, name, reason string) error {
	if p.records == nil {
		return nil
	}
	b, err := json.Marshal(record{Reason: reason, Since: time.Now().UTC()})
	if err == nil {
		_, err = p.records.PutRecord(ctx, key(uuid), b, -1)
	}
	if err != nil {
		p.log.Error("instance not marked ERROR", "name", name, "err", err)
		return fmt.Errorf("the instance could not be marked ERROR: %w", err)
	}
	p.log.Warn("instance in ERROR: a hard reboot is needed", "name", name, "reason", reason)
	return nil
}

// ClearFault takes the instance uuid (named name) out of ERROR.
func (p *Part) ClearFault(ctx context.Context, uuid, name string) error {
	if p.records == nil {
		return nil
	}
	err := p.records.DeleteRecord(ctx, key(uuid), -1)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("clear the ERROR of %s: %w", name, err)
	}
	if err == nil {
		p.log.Info("instance out of ERROR", "name", name)
	}
	return nil
}
