package migrate

import (
	"context"
	"errors"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/revert"
)

// States is the part that keeps the other states of instances (shelved,
// rescued: hostctl/parts/vmstate), which Part shows behind a move's.
type States interface {
	State(ctx context.Context, uuid string) (string, error)
	States(ctx context.Context) (map[string]string, error)
}

// Part is the moves as a part (registered before hostctl/parts/vmstate):
// while an instance moves, every other operation on it is refused,
// naming the move's state and what ends it; the state shows in `hostctl
// instance list|show` (migrating, verify, confirming, reverting) and the
// reconciler leaves the instance to the move (State is not empty).
type Part struct {
	st    Records
	inner States
}

// NewPart returns the part over the store's moves, showing inner's
// states when an instance does not move (nil: none).
func NewPart(st Records, inner States) *Part { return &Part{st: st, inner: inner} }

// Name implements part.Part.
func (*Part) Name() string { return "migration" }

// movingWhy is the reason of the refusals.
const movingWhy = "an instance that is moving between hosts is not changed until its move is confirmed or reverted"

// Answers implements part.Part.
func (*Part) Answers() part.Answers {
	a := part.Answers{}
	for _, op := range part.Ops() {
		a[op] = part.Answer{Do: part.Refuse, Why: movingWhy}
	}
	a[part.ForceDelete] = part.Answer{Do: part.Act, Why: "the move's record goes with the instance (AfterDelete)"}
	a[part.MigrateCold] = part.Answer{Do: part.Act, Why: "each step of the move is a record (hostctl/migrate); the destination's apply is part of it"}
	a[part.MigrateLive] = part.Answer{Do: part.Act, Why: "each step of the live move is a record (hostctl/migrate, live.go); the destination's republish after the switchover is part of it"}
	a[part.ConfirmMigration] = part.Answer{Do: part.Act, Why: "the record goes once the source's copy is gone"}
	a[part.RevertMigration] = part.Answer{Do: part.Act, Why: "the record goes once the instance is back on its source"}
	return a
}

// Check implements part.Part: an operation the part refuses is refused
// while the instance has a move.
func (p *Part) Check(ctx context.Context, op part.Op, in *part.Instance) error {
	if p.st == nil || p.Answers()[op].Do != part.Refuse || in.Spec.UUID == "" {
		return nil
	}
	rec, err := Load(ctx, p.st, in.Spec.UUID)
	if errors.Is(err, ErrNoMove) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: %s %s: the instance is moving from %s to %s (%s): %s", part.ErrState, op, in.Spec.Name, rec.Source, rec.Dest, rec.State, nextMove(rec))
}

// Prepare implements part.Part: nothing to add to a domain.
func (*Part) Prepare(context.Context, part.Op, *part.Instance, *revert.Reverter, *part.Contribution) error {
	return nil
}

// Devices implements part.Part: none.
func (*Part) Devices(*part.Instance) ([]part.Device, error) { return nil, nil }

// AfterStart implements part.Part: nothing.
func (*Part) AfterStart(context.Context, *part.Instance) error { return nil }

// AfterStop implements part.Part: nothing.
func (*Part) AfterStop(context.Context, *part.Instance) error { return nil }

// AfterDelete implements part.Part: a force-deleted instance's move goes.
func (p *Part) AfterDelete(ctx context.Context, in *part.Instance) error {
	if p.st == nil || in.Spec.UUID == "" {
		return nil
	}
	if err := p.st.DeleteRecord(ctx, Key(in.Spec.UUID), -1); err != nil && !isNotFound(err) {
		return fmt.Errorf("remove the move record of %s: %w", in.Spec.Name, err)
	}
	return nil
}

// State is the instance's move state, else the state inner keeps.
func (p *Part) State(ctx context.Context, uuid string) (string, error) {
	if p.st == nil {
		return p.innerState(ctx, uuid)
	}
	rec, err := Load(ctx, p.st, uuid)
	switch {
	case err == nil:
		return rec.State, nil
	case !errors.Is(err, ErrNoMove):
		return "", err
	}
	return p.innerState(ctx, uuid)
}

func (p *Part) innerState(ctx context.Context, uuid string) (string, error) {
	if p.inner == nil {
		return "", nil
	}
	return p.inner.State(ctx, uuid)
}

// States are the states of the instances that have one, a move's
// winning over inner's.
func (p *Part) States(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	if p.inner != nil {
		in, err := p.inner.States(ctx)
		if err != nil {
			return nil, err
		}
		for k, v := range in {
			out[k] = v
		}
	}
	if p.st == nil {
		return out, nil
	}
	recs, err := List(ctx, p.st)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		out[r.UUID] = r.State
	}
	return out, nil
}
