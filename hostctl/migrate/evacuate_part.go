package migrate

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/revert"
)

// EvacuationPart is the evacuations as a part (registered before the
// moves' Part, whose states it shows behind its own): while an instance
// is being evacuated, every other operation on it is refused, naming the
// evacuation's step and what resumes it; the state (evacuating) shows in
// `hostctl instance list|show` and the reconciler leaves the instance to
// the evacuation.
type EvacuationPart struct {
	st    Records
	inner States
}

// NewEvacuationPart returns the part over the store's evacuations,
// showing inner's states when an instance is not being evacuated.
func NewEvacuationPart(st Records, inner States) *EvacuationPart {
	return &EvacuationPart{st: st, inner: inner}
}

// Name implements part.Part.
func (*EvacuationPart) Name() string { return "evacuation" }

const evacuatingWhy = "an instance that is being evacuated is not changed until its evacuation ends (`hostctl instance evacuate NAME --to HOST` resumes it)"

// Answers implements part.Part.
func (*EvacuationPart) Answers() part.Answers {
	a := part.Answers{}
	for _, op := range part.Ops() {
		a[op] = part.Answer{Do: part.Refuse, Why: evacuatingWhy}
	}
	a[part.Evacuate] = part.Answer{Do: part.Act, Why: "each step of the evacuation is a record (hostctl/migrate, evacuate.go); the new host's apply is part of it"}
	a[part.ForceDelete] = part.Answer{Do: part.Nothing, Why: "the evacuation's record stays: the old host removes its copy from it when it comes back"}
	return a
}

// Check implements part.Part: an operation the part refuses is refused
// while the instance is being evacuated.
func (p *EvacuationPart) Check(ctx context.Context, op part.Op, in *part.Instance) error {
	if p.st == nil || p.Answers()[op].Do != part.Refuse || in.Spec.UUID == "" {
		return nil
	}
	rec, ok, err := EvacuationOf(ctx, p.st, in.Spec.UUID)
	if err != nil || !ok {
		return err
	}
	return fmt.Errorf("%w: %s %s: the instance is being evacuated from %s to %s (stopped after step %q): `hostctl instance evacuate %s --to %s` resumes it",
		part.ErrState, op, in.Spec.Name, rec.Source, rec.Dest, rec.Step, rec.Instance, rec.Dest)
}

// Prepare implements part.Part: nothing to add to a domain.
func (*EvacuationPart) Prepare(context.Context, part.Op, *part.Instance, *revert.Reverter, *part.Contribution) error {
	return nil
}

// Devices implements part.Part: none.
func (*EvacuationPart) Devices(*part.Instance) ([]part.Device, error) { return nil, nil }

// AfterStart implements part.Part: nothing.
func (*EvacuationPart) AfterStart(context.Context, *part.Instance) error { return nil }

// AfterStop implements part.Part: nothing.
func (*EvacuationPart) AfterStop(context.Context, *part.Instance) error { return nil }

// AfterDelete implements part.Part: nothing (see ForceDelete's answer).
func (*EvacuationPart) AfterDelete(context.Context, *part.Instance) error { return nil }

// State is "evacuating" while the instance is being evacuated, else the
// state inner keeps.
func (p *EvacuationPart) State(ctx context.Context, uuid string) (string, error) {
	if p.st != nil {
		rec, ok, err := EvacuationOf(ctx, p.st, uuid)
		if err != nil {
			return "", err
		}
		if ok {
			return rec.State, nil
		}
	}
	if p.inner == nil {
		return "", nil
	}
	return p.inner.State(ctx, uuid)
}

// States are the states of the instances that have one, an evacuation's
// winning over inner's.
func (p *EvacuationPart) States(ctx context.Context) (map[string]string, error) {
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
	recs, err := Evacuations(ctx, p.st, "")
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if r.State == Evacuating {
			out[r.UUID] = r.State
		}
	}
	return out, nil
}
