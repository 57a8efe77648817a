package diskrotate

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/revert"
)

// Forgetter deletes the key rotation records of a deleted instance of
// host (keyrotation.Engine.ForgetInstance).
type Forgetter interface {
	ForgetInstance(ctx context.Context, host, uuid string) error
}

// Forget is the host part (hostctl/part) that deletes an instance's key
// rotation records (its disk passphrase policy and status) once a delete
// or a force delete removed the instance: AfterDelete, for the host the
// instance lived on (a force-deleted instance's is another host).
type Forget struct {
	f Forgetter
}

// NewForget returns the part over f (nil: the part does nothing, as for a
// daemon without a key rotation engine).
func NewForget(f Forgetter) *Forget { return &Forget{f: f} }

// Name implements part.Part.
func (*Forget) Name() string { return "key-rotation" }

const forgetWhy = "the instance's key rotation records (policy, status) go with it"

// Answers implements part.Part: the records go with a delete and a force
// delete; every other operation keeps them (a shelved or rescued
// instance's rotation is pending until it is back).
func (*Forget) Answers() part.Answers {
	nothing := part.Answer{Do: part.Nothing}
	return part.Answers{
		part.Apply:            nothing,
		part.Start:            nothing,
		part.Stop:             nothing,
		part.RebootSoft:       nothing,
		part.RebootHard:       nothing,
		part.Delete:           {Do: part.Act, Why: forgetWhy},
		part.ForceDelete:      {Do: part.Act, Why: forgetWhy + " (its owner's records)"},
		part.Adopt:            {Do: part.Nothing, Why: "the records stay under the former owner's name; the engine's sweep keeps them while the instance exists"},
		part.Shelve:           {Do: part.Nothing, Why: "carried: a rotation is pending until the instance is unshelved and stopped"},
		part.Unshelve:         nothing,
		part.Rescue:           {Do: part.Nothing, Why: "carried: a rotation is pending until the instance is unrescued and stopped"},
		part.Unrescue:         nothing,
		part.Resize:           nothing,
		part.Rebuild:          nothing,
		part.Snapshot:         nothing,
		part.MigrateCold:      {Do: part.Nothing, Why: "the records are the store's, keyed by instance: they follow it"},
		part.MigrateLive:      {Do: part.Nothing, Why: "the records are the store's, keyed by instance: they follow it"},
		part.ConfirmMigration: nothing,
		part.RevertMigration:  nothing,
		part.Evacuate:         {Do: part.Nothing, Why: "the records are the store's, keyed by instance: the rebuilt disks start at generation 0 under their new secrets"},
	}
}

// Check implements part.Part: the part refuses nothing.
func (*Forget) Check(context.Context, part.Op, *part.Instance) error { return nil }

// Prepare implements part.Part: no device.
func (*Forget) Prepare(context.Context, part.Op, *part.Instance, *revert.Reverter, *part.Contribution) error {
	return nil
}

// Devices implements part.Part: no device.
func (*Forget) Devices(*part.Instance) ([]part.Device, error) { return nil, nil }

// AfterStart implements part.Part (nothing to do).
func (*Forget) AfterStart(context.Context, *part.Instance) error { return nil }

// AfterStop implements part.Part (nothing to do).
func (*Forget) AfterStop(context.Context, *part.Instance) error { return nil }

// AfterDelete deletes the key rotation records of the deleted instance
// (of in.Host; this engine's host when empty). A failure is reported:
// the records name an instance that no longer exists, and the key
// rotation engine's sweep deletes them on a later run.
func (p *Forget) AfterDelete(ctx context.Context, in *part.Instance) error {
	if p.f == nil || in.Spec == nil || in.Spec.UUID == "" {
		return nil
	}
	if err := p.f.ForgetInstance(context.WithoutCancel(ctx), in.Host, in.Spec.UUID); err != nil {
		return fmt.Errorf("key rotation records of deleted instance %s not deleted (the key rotation sweep retries): %w", in.Spec.Name, err)
	}
	return nil
}
