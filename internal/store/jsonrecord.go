package store

import (
	"context"
	"encoding/json"
	"fmt"
)

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
// read (Update); on a conflict (another writer in between) the record is
// read and change called again, up to MaxCASAttempts. It returns the
// value as stored (or as read, when change wrote nothing). An error of
// change is returned as it is, and nothing is written.
func UpdateJSON[T any](ctx context.Context, r ReadWriter, key string, change func(v *T, exists bool) (bool, error)) (T, error) {
	var v T
	_, err := Update(ctx, r, key, func(old Record, exists bool) ([]byte, error) {
		v = *new(T)
		if exists {
			if err := json.Unmarshal(old.Value, &v); err != nil {
				return nil, fmt.Errorf("record %s: %w", key, err)
			}
		}
		write, err := change(&v, exists)
		if err != nil || !write {
			return nil, err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("record %s: %w", key, err)
		}
		return b, nil
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}
