// Package revert undoes multi-step host changes that did not complete.
//
// A change (define a domain, create disks, add DHCP leases, publish)
// registers an undo step after each step it made; unless it reaches
// Success, Fail runs the undo steps newest first:
//
//	r := revert.New(log, "apply web-1")
//	defer r.Fail(&err)
//	... make a change; r.Add("remove disk vdb", func(ctx context.Context) error { ... })
//	... commit (the store write); r.Success()
//
// Unlike Incus's shared/revert, undo steps take a context (their own,
// bounded by Timeout: the request's context may be what ended the change)
// and may fail: failures are logged and joined onto the error the change
// returns, so an operator learns what was left behind.
//
// A callee that makes steps its caller must be able to undo hands them
// over with Clone (or the caller takes them with Adopt):
//
//	func createDisks(...) (_ *revert.Reverter, err error) {
//		r := revert.New(log, "create disks")
//		defer r.Fail(&err)
//		... r.Add(...)
//		undo := r.Clone()
//		r.Success()
//		return undo, nil
//	}
//	...
//	undo, err := createDisks(...); parent.Adopt(undo)
package revert

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Timeout bounds all undo steps of one failed change together.
const Timeout = time.Minute

// Reverter collects the undo steps of one change. It is not safe for
// concurrent use: a change is one goroutine's sequence of steps.
type Reverter struct {
	log     *slog.Logger
	what    string
	timeout time.Duration
	steps   []step
	done    bool
}

type step struct {
	what string
	f    func(context.Context) error
}

// New returns a Reverter for the change named what (used in logs and
// errors). A nil log discards.
func New(log *slog.Logger, what string) *Reverter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reverter{log: log, what: what, timeout: Timeout}
}

// WithTimeout sets the bound of all undo steps together (default Timeout).
func (r *Reverter) WithTimeout(d time.Duration) *Reverter {
	r.timeout = d
	return r
}

// Add registers the undo step of a change just made.
func (r *Reverter) Add(what string, f func(ctx context.Context) error) {
	r.steps = append(r.steps, step{what: what, f: f})
}

// Len is the number of registered undo steps.
func (r *Reverter) Len() int { return len(r.steps) }

// Success marks the change committed: Fail does nothing after it.
func (r *Reverter) Success() { r.done = true }

// Clone returns a new Reverter holding the steps registered so far, for a
// callee to hand to its caller before it calls Success on its own.
func (r *Reverter) Clone() *Reverter {
	return &Reverter{log: r.log, what: r.what, timeout: r.timeout, steps: append([]step(nil), r.steps...)}
}

// Adopt appends the steps of other (a callee's Clone) to r, newest last,
// and marks other done, so they run once: when r fails.
func (r *Reverter) Adopt(other *Reverter) {
	if other == nil || other.done {
		return
	}
	r.steps = append(r.steps, other.steps...)
	other.done = true
}

// Fail undoes every registered step, newest first, unless Success was
// called. Meant for defer with the function's named error result: undo
// steps that fail are joined onto *errp (errp may be nil).
func (r *Reverter) Fail(errp *error) {
	if r.done || len(r.steps) == 0 {
		return
	}
	r.done = true
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
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
