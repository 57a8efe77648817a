package part

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/revert"
)

// Set is the registered parts, in registration order. The core runs each
// phase over it at its point of the operation (the package doc lists
// them): Acting selects the parts of a phase, Run runs them in order.
type Set []Part

// Acting yields, in registration order, the name and the P of every part
// of s that implements P and answers Act for op (of every one that
// implements P when op is "").
func Acting[P any](s Set, op Op) iter.Seq2[string, P] {
	return func(yield func(string, P) bool) {
		for _, p := range s {
			q, ok := p.(P)
			if ok && (op == "" || p.Answers()[op].Do == Act) && !yield(p.Name(), q) {
				return
			}
		}
	}
}

// Run runs phase for every part Acting yields; the first error stops it,
// naming the part.
func Run[P any](s Set, op Op, phase func(P) error) error {
	for name, p := range Acting[P](s, op) {
		if err := phase(p); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// First is the first part Acting yields.
func First[P any](s Set, op Op) (P, bool) {
	for _, p := range Acting[P](s, op) {
		return p, true
	}
	var none P
	return none, false
}

// Check runs Check of every part that does not answer Nothing for op (a
// Refuse answer is checked too). A refusal wraps ErrState; another error
// (bad input, a *model.SpecError) is returned as the part gives it.
func (s Set) Check(ctx context.Context, op Op, in *Instance) error {
	for _, p := range s {
		if p.Answers()[op].Do == Nothing {
			continue
		}
		if err := p.Check(ctx, op, in); err != nil {
			if _, refused := errors.AsType[*RefusedError](err); refused {
				return fmt.Errorf("%w: %w", ErrState, err)
			}
			return err
		}
	}
	return nil
}

// Claim runs Claim (Claimer) and returns the end that hands the
// operation's outcome to every claim, newest first. A Claim that fails
// ends those before it with its error and is returned as it is.
func (s Set) Claim(ctx context.Context, op Op, in *Instance) (end func(context.Context, error), err error) {
	var ends []func(context.Context, error)
	end = func(ctx context.Context, err error) {
		for i := len(ends) - 1; i >= 0; i-- {
			ends[i](ctx, err)
		}
	}
	for _, p := range Acting[Claimer](s, op) {
		e, err := p.Claim(ctx, op, in)
		if err != nil {
			end(ctx, err)
			return nil, err
		}
		ends = append(ends, e)
	}
	return end, nil
}

// Complete runs Complete (Completer); r undoes what they did.
func (s Set) Complete(ctx context.Context, op Op, in *Instance, r *revert.Reverter) error {
	return Run(s, op, func(p Completer) error { return p.Complete(ctx, op, in, r) })
}

// Prepare runs Prepare and returns what the parts contribute.
func (s Set) Prepare(ctx context.Context, op Op, in *Instance, r *revert.Reverter) (Contribution, error) {
	var c Contribution
	err := Run(s, op, func(p Part) error { return p.Prepare(ctx, op, in, r, &c) })
	return c, err
}

// Defined runs Defined (Definer); their undo steps go on r.
func (s Set) Defined(ctx context.Context, op Op, in *Instance, r *revert.Reverter) error {
	return Run(s, op, func(p Definer) error { return p.Defined(ctx, op, in, r) })
}

// Publish runs Publish (Publisher) of every part, whatever the operation;
// commit runs what they do once the store write succeeded.
func (s Set) Publish(ctx context.Context, in *Instance, tree *metadata.Tree, rev int64, r *revert.Reverter) (commit func(), err error) {
	var commits []func()
	err = Run(s, "", func(p Publisher) error {
		commit, err := p.Publish(ctx, in, tree, rev, r)
		if commit != nil {
			commits = append(commits, commit)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return func() {
		for _, f := range commits {
			f()
		}
	}, nil
}

// Drifted is the first Publisher's Drifted that is not "", with the
// part's name ("", "" when none).
func (s Set) Drifted(ctx context.Context, in *Instance, rev int64) (part, reason string) {
	for name, p := range Acting[Publisher](s, "") {
		if why := p.Drifted(ctx, in, rev); why != "" {
			return name, why
		}
	}
	return "", ""
}

// ChangeMedium is ChangeMedium of the first MediaChanger, if any, whatever
// the operation (commit is never nil).
func (s Set) ChangeMedium(ctx context.Context, r *revert.Reverter, name, staged string, rev int64) (commit func(), warnings []string, err error) {
	if m, ok := First[MediaChanger](s, ""); ok {
		return m.ChangeMedium(ctx, r, name, staged, rev)
	}
	return func() {}, nil, nil
}

// Committed runs Committed (Committer) and returns the parts' notes.
func (s Set) Committed(ctx context.Context, op Op, in *Instance) []string {
	var notes []string
	for _, p := range Acting[Committer](s, op) {
		notes = append(notes, p.Committed(ctx, op, in)...)
	}
	return notes
}

// PreStart runs PreStart (PreStarter); its first error is returned as the
// part gives it.
func (s Set) PreStart(ctx context.Context, op Op, in *Instance) error {
	for _, p := range Acting[PreStarter](s, op) {
		if err := p.PreStart(ctx, op, in); err != nil {
			return err
		}
	}
	return nil
}

// BeforeStart runs BeforeStart (Starter) of every part, whatever the
// operation; their undo steps go on r.
func (s Set) BeforeStart(ctx context.Context, in *Instance, r *revert.Reverter) error {
	return Run(s, "", func(p Starter) error { return p.BeforeStart(ctx, in, r) })
}

// StartFailed tells every StartFailer, whatever the operation, that the
// start failed with err, and returns err joined by their errors.
func (s Set) StartFailed(ctx context.Context, in *Instance, err error) error {
	errs := []error{err}
	for _, p := range Acting[StartFailer](s, "") {
		if ferr := p.StartFailed(ctx, in, err); ferr != nil {
			errs = append(errs, ferr)
		}
	}
	if len(errs) == 1 {
		return err
	}
	return errors.Join(errs...)
}

// Remove runs Remove (Remover); their undo steps go on r.
func (s Set) Remove(ctx context.Context, op Op, in *Instance, r *revert.Reverter) error {
	return Run(s, op, func(p Remover) error { return p.Remove(ctx, op, in, r) })
}

// After runs one after-phase (Part.AfterStart, Part.AfterStop,
// Part.AfterDelete) of the parts that act on op (of every part when op is
// ""), each whatever the others did; report is told of each failure.
func (s Set) After(ctx context.Context, phase func(Part, context.Context, *Instance) error, op Op, in *Instance, report func(part string, err error)) {
	for name, p := range Acting[Part](s, op) {
		if err := phase(p, ctx, in); err != nil {
			report(name, err)
		}
	}
}

// Devices lists the devices of every part for in; a part whose Devices
// fails is listed as one device of Kind its name, Detail "unknown: " and
// the error, and the first such error is returned too.
func (s Set) Devices(in *Instance) ([]Device, error) {
	var out []Device
	var first error
	for _, p := range s {
		devs, err := p.Devices(in)
		if err != nil {
			out = append(out, Device{Kind: p.Name(), Detail: "unknown: " + err.Error()})
			if first == nil {
				first = fmt.Errorf("%s: %w", p.Name(), err)
			}
		}
		out = append(out, devs...)
	}
	return out, first
}
