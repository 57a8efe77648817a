// Package vmstate is the part that keeps the states hostctl gives an
// instance besides its libvirt domain's (issue: ephemeral storage
// encryption, item 8; issue 22: parts): an instance shelved (hostctl/ops,
// shelve.go) or rescued (rescue.go). Each is one store record per
// instance UUID (instance-vmstate/<uuid>, record.go), so the state holds
// across daemon restarts and every host sees it. While an instance has
// one:
//
//   - `hostctl instance show|list` shows it as the instance's state
//     (Shelved, Rescue): the core asks States;
//   - apply, start, stop, reboot, resize, rebuild, snapshot, shelve,
//     rescue and hot-plug are refused (Check: part.ErrState, 409, naming
//     the state and the way out); unshelve and unrescue are refused
//     unless the instance is in their state;
//   - the reconciler leaves the instance alone: a shelved instance has no
//     domain and is not "missing", a rescued one runs another definition
//     that is not "repaired" back;
//   - its block-device records and key-manager secrets stay, so the
//     secrets sweep counts them in use (Summaries, ImageUsers);
//   - delete removes the record and a shelved instance's image
//     (AfterDelete); adopt takes a shelved instance only where its image
//     is, and a rescued one out of its old host's rescue (Check,
//     Committed); delete --force-from-store removes the record and names
//     what stays on the dead host (Committed).
//
// The part imports nothing of the controller: the daemon registers it
// first among the parts and binds it to the core (Bind); the operations
// (hostctl/ops) write and end the states through it (Put, Require, Drop).
package vmstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// States of an instance kept by hostctl (the instance's State).
const (
	// Shelved: the instance's root disk is an image of the catalog, its
	// domain and disk files are gone (Nova's SHELVED_OFFLOADED).
	Shelved = "shelved_offloaded"
	// Rescue: the domain boots a rescue disk, the instance's root disk
	// attached as its second disk (Nova's RESCUED).
	Rescue = "rescue"
)

// streamImages is the audit stream of image events (the controller's
// StreamImages).
const streamImages = "images"

// Catalog is this host's image catalog as the part uses it (an
// *images.Dir): an adopted shelved instance's image must be in it, a
// deleted shelved instance's image goes from it.
type Catalog interface {
	Get(ctx context.Context, name string) (images.Image, error)
	Delete(ctx context.Context, name string, inUse func(context.Context) ([]string, error)) error
}

// Core is what the part needs of the controller core.
type Core interface {
	// Emit records an event on the audit log's stream.
	Emit(ctx context.Context, stream, typ string, payload any)
	// PowerState is the state of the instance's domain as list shows it
	// ("running", "shutoff"; "" when not known).
	PowerState(ctx context.Context, name, uuid string) string
}

// Part is the instance-states part.
type Part struct {
	records store.Records
	host    string
	images  Catalog
	core    Core
	log     *slog.Logger
}

var (
	_ part.Part      = (*Part)(nil)
	_ part.Completer = (*Part)(nil)
	_ part.Committer = (*Part)(nil)
)

// New returns the part over the store's records (nil: the store keeps
// none, so no instance has a state and none can get one) for host (the
// name the records say they were made on).
func New(records store.Records, host string) *Part {
	return &Part{records: records, host: host, log: slog.Default()}
}

// Bind gives the part this host's image catalog, the controller core and
// its logger; call it before the core serves.
func (p *Part) Bind(cat Catalog, core Core, log *slog.Logger) {
	p.images, p.core = cat, core
	if log != nil {
		p.log = log
	}
}

// Name implements part.Part.
func (*Part) Name() string { return "vmstate" }

// Answers implements part.Part.
func (*Part) Answers() part.Answers {
	refuse := func(what string) part.Answer {
		return part.Answer{Do: part.Refuse, Why: "a shelved or rescued instance is not " + what + " (unshelve or unrescue it first)"}
	}
	return part.Answers{
		part.Apply:            {Do: part.Act, Why: "refuses an apply of a shelved or rescued instance before anything of it is done (Complete)"},
		part.Start:            refuse("started"),
		part.Stop:             refuse("stopped"),
		part.RebootSoft:       refuse("rebooted"),
		part.RebootHard:       refuse("rebooted"),
		part.Delete:           {Do: part.Act, Why: "removes the state record and a shelved instance's image (AfterDelete)"},
		part.ForceDelete:      {Do: part.Act, Why: "removes the state record and names what stays on the dead host (Committed)"},
		part.Adopt:            {Do: part.Act, Why: "refuses a shelved instance whose image this host's catalog lacks; a rescued one leaves its old host's rescue (Committed)"},
		part.Shelve:           {Do: part.Act, Why: "refuses an instance already shelved or rescued; the shelve records the state (Put)"},
		part.Unshelve:         {Do: part.Act, Why: "refuses an instance that is not shelved; the unshelve ends the state (Drop)"},
		part.Rescue:           {Do: part.Act, Why: "refuses an instance already shelved or rescued; the rescue records the state (Put)"},
		part.Unrescue:         {Do: part.Act, Why: "refuses an instance that is not in rescue; the unrescue ends the state (Drop)"},
		part.Resize:           refuse("resized"),
		part.Rebuild:          refuse("rebuilt"),
		part.Snapshot:         refuse("snapshotted"),
		part.MigrateCold:      refuse("migrated"),
		part.MigrateLive:      refuse("live-migrated"),
		part.ConfirmMigration: {Do: part.Nothing, Why: "only an instance in no state of its own moves"},
		part.RevertMigration:  {Do: part.Nothing, Why: "only an instance in no state of its own moves"},
		part.Evacuate:         refuse("evacuated: a shelved one has nothing on its host to rebuild (adopt moves its record; unshelve builds it where it lands), a rescued one's rescue is its dead host's (adopt it, then unrescue)"),
	}
}

// Check implements part.Part: an operation the instance's state does not
// allow is refused (part.ErrState), naming the state and the way out.
func (p *Part) Check(ctx context.Context, op part.Op, in *part.Instance) error {
	name, uuid := in.Spec.Name, in.Spec.UUID
	switch op {
	case part.Delete, part.ForceDelete, part.ConfirmMigration, part.RevertMigration:
		return nil // a move in verify ends whatever state it is in
	case part.Unshelve:
		_, _, err := p.Require(ctx, name, uuid, Shelved)
		return err
	case part.Unrescue:
		_, _, err := p.Require(ctx, name, uuid, Rescue)
		return err
	case part.Adopt:
		return p.checkAdopt(ctx, in)
	}
	st, _, err := p.Of(ctx, uuid)
	if err != nil {
		return err
	}
	return refusal(name, st.State)
}

// refusal refuses an operation on instance name in state ("": none).
func refusal(name, state string) error {
	switch state {
	case "":
		return nil
	case Shelved:
		return fmt.Errorf("%w: the instance is %s (hostctl instance unshelve %s first)", part.ErrState, state, name)
	case Rescue:
		return fmt.Errorf("%w: the instance is in %s (hostctl instance unrescue %s first)", part.ErrState, state, name)
	default:
		return fmt.Errorf("%w: the instance is %s", part.ErrState, state)
	}
}

// notIn refuses an operation that needs state want on an instance in
// state (its domain's state when it has none of hostctl's).
func (p *Part) notIn(ctx context.Context, name, uuid, want, state string) error {
	if state == "" && p.core != nil {
		state = p.core.PowerState(ctx, name, uuid)
	}
	what := "shelved"
	if want == Rescue {
		what = "in rescue"
	}
	return fmt.Errorf("%w: the instance is not %s (state %s)", part.ErrState, what, state)
}

// checkAdopt: a shelved instance's root disk is an image of its old
// host's catalog, so it is adopted only when this host's catalog has that
// image (imported here first). A rescued one is adopted (Committed takes
// it out of the rescue).
func (p *Part) checkAdopt(ctx context.Context, in *part.Instance) error {
	st, _, err := p.Of(ctx, in.Spec.UUID)
	if err != nil || st.State != Shelved {
		return err
	}
	if p.images == nil {
		return fmt.Errorf("%w: the instance is %s and this host's image catalog is not known", part.ErrState, st.State)
	}
	_, err = p.images.Get(ctx, st.ShelvedImage)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w: the instance is %s and its root disk is image %s of host %s's catalog, which this host does not have: import it here (hostctl image import %s) first",
			part.ErrState, st.State, st.ShelvedImage, in.Host, st.ShelvedImage)
	case err != nil:
		return fmt.Errorf("shelved image %s: %w", st.ShelvedImage, err)
	}
	return nil
}

// Complete implements part.Completer: an apply of a shelved or rescued
// instance is refused before anything of it is done (in.Spec.UUID is the
// stored instance's).
func (p *Part) Complete(ctx context.Context, op part.Op, in *part.Instance, _ *revert.Reverter) error {
	if op != part.Apply {
		return nil
	}
	st, _, err := p.Of(ctx, in.Spec.UUID)
	if err != nil {
		return err
	}
	return refusal(in.Spec.Name, st.State)
}

// Prepare implements part.Part: no device.
func (*Part) Prepare(context.Context, part.Op, *part.Instance, *revert.Reverter, *part.Contribution) error {
	return nil
}

// Devices implements part.Part: no device.
func (*Part) Devices(*part.Instance) ([]part.Device, error) { return nil, nil }

// AfterStart implements part.Part (nothing to do).
func (*Part) AfterStart(context.Context, *part.Instance) error { return nil }

// AfterStop implements part.Part (nothing to do).
func (*Part) AfterStop(context.Context, *part.Instance) error { return nil }

// AfterDelete implements part.Part: this host's instance is deleted, so
// its state record goes, and a shelved instance's image with it (failures
// are logged). Another host's instance (a force delete) is left to
// Committed: its image is in that host's catalog.
func (p *Part) AfterDelete(ctx context.Context, in *part.Instance) error {
	if in.Host != "" && p.host != "" && in.Host != p.host {
		return nil
	}
	name := in.Spec.Name
	st, ver, err := p.Of(ctx, in.Spec.UUID)
	if err != nil || st.State == "" {
		return err
	}
	if st.ShelvedImage != "" && p.images != nil {
		if err := p.images.Delete(ctx, st.ShelvedImage, nil); err != nil && !errors.Is(err, store.ErrNotFound) {
			p.log.Warn("shelved image of a deleted instance not deleted", "name", name, "image", st.ShelvedImage, "err", err)
		} else if p.core != nil {
			p.core.Emit(ctx, streamImages, "image.deleted", map[string]string{"name": st.ShelvedImage})
		}
	}
	if err := p.Drop(ctx, nil, in.Spec.UUID, st, ver); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("state record of deleted instance %s not removed: %w", name, err)
	}
	return nil
}

// Committed implements part.Committer. An adopted instance that was in
// rescue on its old host leaves it (the adopting host defines its domain
// from its spec, as for any adopted instance): its state record goes. An
// instance deleted from the store by force loses its state record; the
// notes say what stays on its dead host (in.Host): a shelved instance's
// image in that host's catalog, a rescue's domain.
func (p *Part) Committed(ctx context.Context, op part.Op, in *part.Instance) []string {
	name := in.Spec.Name
	st, ver, err := p.Of(ctx, in.Spec.UUID)
	switch {
	case op != part.Adopt && op != part.ForceDelete:
		return nil
	case err != nil && op == part.ForceDelete:
		return []string{fmt.Sprintf("the state record of %s (not read: %v)", name, err)}
	case err != nil:
		p.log.Warn("adopted; its state record not read", "name", name, "err", err)
		return nil
	case op == part.Adopt:
		if st.State != Rescue {
			return nil
		}
		if err := p.Drop(ctx, nil, in.Spec.UUID, st, ver); err != nil {
			p.log.Warn("adopted, but the rescue it was in on its old host is still recorded", "name", name, "from", st.Host, "err", err)
			return []string{fmt.Sprintf("the rescue %s was in on host %s is still recorded (%v)", name, st.Host, err)}
		}
		p.log.Info("adopted instance leaves the rescue it was in on its old host", "name", name, "from", st.Host, "rescue_image", st.RescueImage)
		return nil
	}
	var left []string
	switch st.State {
	case "":
		return nil
	case Shelved:
		left = append(left, fmt.Sprintf("the shelved image %s in host %s's image catalog (delete it there: hostctl image delete %s)", st.ShelvedImage, in.Host, st.ShelvedImage))
	case Rescue:
		left = append(left, fmt.Sprintf("the rescue domain of %s and its rescue disk on host %s", name, in.Host))
	}
	if err := p.Drop(ctx, nil, in.Spec.UUID, st, ver); err != nil && !errors.Is(err, store.ErrNotFound) {
		left = append(left, fmt.Sprintf("the state record of %s (%v)", name, err))
	}
	return left
}
