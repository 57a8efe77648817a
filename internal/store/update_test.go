package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// conflicting is a one-record ReadWriter whose first n writes conflict
// (as if another writer got in before each).
type conflicting struct {
	n      int
	rec    Record
	exists bool
	writes int
}

func (c *conflicting) Record(_ context.Context, key string) (Record, error) {
	if !c.exists {
		return Record{}, fmt.Errorf("record %s: %w", key, ErrNotFound)
	}
	return c.rec, nil
}

func (c *conflicting) PutRecord(_ context.Context, key string, value []byte, expect int64) (Record, error) {
	c.writes++
	if c.writes <= c.n {
		c.rec.Version++ // the other writer's
		c.exists = true
		return Record{}, fmt.Errorf("record %s: %w", key, ErrConflict)
	}
	if expect != c.rec.Version {
		return Record{}, fmt.Errorf("record %s: %w: expected %d, stored %d", key, ErrConflict, expect, c.rec.Version)
	}
	c.rec = Record{Key: key, Value: value, Version: c.rec.Version + 1}
	c.exists = true
	return c.rec, nil
}

// TestUpdate: the one compare-and-swap loop retries conflicts up to
// MaxCASAttempts, writes on the version read, returns change's error as
// it is (a conflict among them) without writing, gives up with
// ErrConflict past the bound, and stops with ctx's error, not a
// conflict, when ctx is done.
func TestUpdate(t *testing.T) {
	ctx := context.Background()
	inc := func(calls *int) func(Record, bool) ([]byte, error) {
		return func(old Record, exists bool) ([]byte, error) {
			*calls++
			return append([]byte(nil), append(old.Value, 'x')...), nil
		}
	}
	for _, n := range []int{0, 1, 20, MaxCASAttempts - 1} {
		c := &conflicting{n: n}
		calls := 0
		rec, err := Update(ctx, c, "k", inc(&calls))
		if err != nil || calls != n+1 || rec.Version != int64(n+1) || string(rec.Value) != "x" {
			t.Errorf("%d conflicts: %q v%d, %v after %d calls; want x v%d after %d", n, rec.Value, rec.Version, err, calls, n+1, n+1)
		}
	}

	c := &conflicting{n: MaxCASAttempts}
	calls := 0
	_, err := Update(ctx, c, "k", inc(&calls))
	if !errors.Is(err, ErrConflict) || calls != MaxCASAttempts || !strings.Contains(err.Error(), "record k: gave up after") {
		t.Errorf("conflicts past the bound: %v after %d calls; want ErrConflict after %d", err, calls, MaxCASAttempts)
	}

	refused := fmt.Errorf("no: %w", ErrConflict)
	c = &conflicting{exists: true, rec: Record{Key: "k", Value: []byte("v"), Version: 3}}
	_, err = Update(ctx, c, "k", func(Record, bool) ([]byte, error) { return nil, refused })
	if !errors.Is(err, refused) || errors.As(err, new(*finalError)) || c.writes != 0 {
		t.Errorf("change refusing: %v, %d writes; want its error as it is, no write", err, c.writes)
	}
	rec, err := Update(ctx, c, "k", func(Record, bool) ([]byte, error) { return nil, nil })
	if err != nil || c.writes != 0 || rec.Version != 3 {
		t.Errorf("change writing nothing: v%d, %v, %d writes; want the record as read", rec.Version, err, c.writes)
	}

	cctx, cancel := context.WithCancel(ctx)
	c = &conflicting{n: MaxCASAttempts}
	calls = 0
	_, err = Update(cctx, c, "k", func(old Record, exists bool) ([]byte, error) {
		calls++
		if calls == 2 {
			cancel()
		}
		return []byte("v"), nil
	})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrConflict) || calls != 2 {
		t.Errorf("ctx done after a conflict: %v after %d calls; want context.Canceled, not ErrConflict, after 2", err, calls)
	}
}

// TestRetryConflictsFinal: Final hands back its error unmarked, at once.
func TestRetryConflictsFinal(t *testing.T) {
	refusal := fmt.Errorf("device in use: %w", ErrConflict)
	calls := 0
	err := RetryConflicts(context.Background(), "clean", func() error { calls++; return Final(refusal) })
	if !errors.Is(err, refusal) || errors.As(err, new(*finalError)) || calls != 1 {
		t.Errorf("Final conflict: %v after %d calls; want it as it is after 1", err, calls)
	}
	if Final(nil) != nil {
		t.Error("Final(nil) is not nil")
	}
}
