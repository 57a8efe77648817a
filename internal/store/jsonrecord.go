package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// maxUpdateAttempts bounds the compare-and-swap retries of UpdateJSON.
const maxUpdateAttempts = 16

// GetJSON reads the record under key and decodes its JSON value into a T,
// returning it with the record's version. A missing record is ErrNotFound.
func GetJSON[T any](ctx context.Context, r Records, key string) (T, int64, error) {
	var v T
	rec, err := r.Record(ctx, key)
	if err != nil {
		return v, 0, err
	}
	if err := json.Unmarshal(rec.Value, &v); err != nil {
		return v, 0, fmt.Errorf("record %s: %w", key, err)
	}
	return v, rec.Version, nil
}

// UpdateJSON changes the JSON record under key with change, which gets
// the current value (the zero T and exists false when there is none) and
// says whether to write it. The write is a compare-and-swap on the version
// read; on a conflict (another writer in between) the record is read and
// change called again, up to a bound. It returns the value as stored (or
// as read, when change wrote nothing). An error of change is returned
// as it is, and nothing is written.
func UpdateJSON[T any](ctx context.Context, r Records, key string, change func(v *T, exists bool) (bool, error)) (T, error) {
	for range maxUpdateAttempts {
		v, ver, err := GetJSON[T](ctx, r, key)
		exists := err == nil
		if err != nil && !errors.Is(err, ErrNotFound) {
			return v, err
		}
		write, err := change(&v, exists)
		if err != nil || !write {
			return v, err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return v, fmt.Errorf("record %s: %w", key, err)
		}
		if _, err = r.PutRecord(ctx, key, b, ver); err == nil {
			return v, nil
		}
		if !errors.Is(err, ErrConflict) {
			return v, err
		}
	}
	var zero T
	return zero, fmt.Errorf("record %s: %w: still changing after %d attempts", key, ErrConflict, maxUpdateAttempts)
}
