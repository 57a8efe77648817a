package store

import (
	"context"
	"errors"
	"fmt"
)

// MaxCASAttempts bounds every compare-and-swap loop of vmeta (Update,
// UpdateJSON, RetryConflicts). A conflict means another writer changed
// the record in between, which is progress for that writer, so the bound
// only catches a loop that never wins: it is far above what contention
// produces (a device claim among hundreds of claimers conflicts at most
// once per device another claimer took).
const MaxCASAttempts = 1000

// ReadWriter is the part of Records that Update uses.
type ReadWriter interface {
	Record(ctx context.Context, key string) (Record, error)
	PutRecord(ctx context.Context, key string, value []byte, expectVersion int64) (Record, error)
}

// Update changes the record under key with change, which gets the record
// read (exists false, and the zero Record, when there is none) and
// returns its new value, or nil to leave it as it is. The write is a
// compare-and-swap on the version read (a missing record must still be
// missing); on a conflict the record is read and change called again
// (RetryConflicts). It returns the record as stored, or as read when
// change wrote nothing. An error of change is returned as it is, and
// nothing is written.
func Update(ctx context.Context, r ReadWriter, key string, change func(old Record, exists bool) ([]byte, error)) (Record, error) {
	var out Record
	err := RetryConflicts(ctx, "record "+key, func() error {
		old, err := r.Record(ctx, key)
		exists := err == nil
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if !exists {
			old = Record{}
		}
		value, err := change(old, exists)
		if err != nil {
			return Final(err)
		}
		if value == nil {
			out = old
			return nil
		}
		out, err = r.PutRecord(ctx, key, value, old.Version) // 0 when missing: must still be
		return err
	})
	return out, err
}

// RetryConflicts calls attempt until it returns anything but a conflict
// (errors.Is ErrConflict), and returns that: nil, or the error as it is.
// It gives up after MaxCASAttempts conflicts, or when ctx is done after a
// conflict, with an error that starts with what. The last conflict is
// wrapped when it gives up, and only told when ctx ended the loop (a
// cancelled request is not a conflict). An error marked Final is
// returned, unmarked, at once even when it is a conflict.
func RetryConflicts(ctx context.Context, what string, attempt func() error) error {
	var err error
	for range MaxCASAttempts {
		err = attempt()
		var f *finalError
		if errors.As(err, &f) {
			return f.err
		}
		if !errors.Is(err, ErrConflict) {
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("%s: %w (last conflict: %s)", what, cerr, err.Error())
		}
	}
	return fmt.Errorf("%s: gave up after %d conflicting attempts: %w", what, MaxCASAttempts, err)
}

// Final marks err as the answer of an attempt of RetryConflicts, to be
// returned without another attempt even when it is a conflict (a refusal
// another attempt would not change). Final(nil) is nil.
func Final(err error) error {
	if err == nil {
		return nil
	}
	return &finalError{err}
}

type finalError struct{ err error }

func (e *finalError) Error() string { return e.err.Error() }
func (e *finalError) Unwrap() error { return e.err }
