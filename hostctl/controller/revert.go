package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// undoTimeout bounds all undo steps of one failed change together; they
// run on a context of their own, since the request's may be what ended.
const undoTimeout = time.Minute

// revert collects the undo steps of a multi-step host change (files,
// libvirt, network) and, unless the change reached Success, runs them
// newest first:
//
//	r := c.newRevert("apply " + name)
//	defer r.Fail(&err)
//	... make a change; r.Add("remove disk vdb", func(ctx context.Context) error { ... })
//	... commit (the store write); r.Success()
//
// Undo steps that fail are logged and appended to the error Fail reports,
// so an operator learns what was left behind.
type revert struct {
	log   *slog.Logger
	what  string
	steps []undoStep
	done  bool
}

type undoStep struct {
	what string
	f    func(context.Context) error
}

func (c *Controller) newRevert(what string) *revert {
	return &revert{log: c.log, what: what}
}

// Add registers the undo step of a change just made.
func (r *revert) Add(what string, f func(ctx context.Context) error) {
	r.steps = append(r.steps, undoStep{what: what, f: f})
}

// Success marks the change committed: Fail does nothing after it.
func (r *revert) Success() { r.done = true }

// Fail undoes every registered step, newest first, unless Success was
// called. Meant for defer with the function's named error result: undo
// steps that fail are joined onto *errp.
func (r *revert) Fail(errp *error) {
	if r.done || len(r.steps) == 0 {
		return
	}
	r.done = true
	ctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
	defer cancel()
	var failed []error
	for i := len(r.steps) - 1; i >= 0; i-- {
		s := r.steps[i]
		if err := s.f(ctx); err != nil {
			r.log.Error("undo step failed; the host may keep a leftover", "change", r.what, "undo", s.what, "err", err)
			failed = append(failed, fmt.Errorf("%s: %w", s.what, err))
			continue
		}
		r.log.Debug("undone", "change", r.what, "undo", s.what)
	}
	if len(failed) > 0 && errp != nil {
		if *errp == nil {
			*errp = fmt.Errorf("%s did not complete", r.what)
		}
		*errp = fmt.Errorf("%w; undoing it failed too: %w", *errp, errors.Join(failed...))
	}
}
