package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/internal/check"
)

// A record is stored in the records bucket under its key as the version
// (8 bytes, big-endian) followed by the value.
const versionLen = 8

func encodeRecord(version int64, value []byte) []byte {
	v := make([]byte, versionLen, versionLen+len(value))
	binary.BigEndian.PutUint64(v, uint64(version))
	return append(v, value...)
}

// decodeRecord copies what it returns: v is only valid inside the
// transaction.
func decodeRecord(key string, v []byte) (store.Record, error) {
	if len(v) < versionLen {
		return store.Record{}, fmt.Errorf("record %s: stored value is %d bytes, shorter than its version", key, len(v))
	}
	return store.Record{
		Key:     key,
		Value:   cloneValue(v[versionLen:]),
		Version: int64(binary.BigEndian.Uint64(v)),
	}, nil
}

// cloneValue copies a value; never nil, so that an empty value reads back
// as empty, not as missing.
func cloneValue(v []byte) []byte {
	out := make([]byte, len(v))
	copy(out, v)
	return out
}

// storedVersion returns the version of the record under key, 0 when
// there is none.
func storedVersion(b *bbolt.Bucket, key string) (int64, error) {
	v := b.Get([]byte(key))
	if v == nil {
		return 0, nil
	}
	if len(v) < versionLen {
		return 0, fmt.Errorf("stored value is %d bytes, shorter than its version", len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// Record implements store.Records.
func (s *Store) Record(ctx context.Context, key string) (store.Record, error) {
	if err := store.CheckKey(key); err != nil {
		return store.Record{}, fmt.Errorf("record: %w", err)
	}
	var rec store.Record
	err := s.view(ctx, func(b buckets) error {
		v := b.records.Get([]byte(key))
		if v == nil {
			return store.ErrNotFound
		}
		var err error
		rec, err = decodeRecord(key, v)
		return err
	})
	if err != nil {
		return store.Record{}, fmt.Errorf("record %s: %w", key, err)
	}
	return rec, nil
}

// PutRecord implements store.Records in one read-write transaction.
func (s *Store) PutRecord(ctx context.Context, key string, value []byte, expectVersion int64) (store.Record, error) {
	if err := store.CheckKey(key); err != nil {
		return store.Record{}, fmt.Errorf("put record: %w", err)
	}
	var version int64
	err := s.update(ctx, func(b buckets) error {
		stored, err := storedVersion(b.records, key)
		if err != nil {
			return err
		}
		if expectVersion >= 0 && expectVersion != stored {
			return check.RecordVersion(expectVersion, stored)
		}
		version = stored + 1
		return b.records.Put([]byte(key), encodeRecord(version, value))
	})
	if err != nil {
		return store.Record{}, fmt.Errorf("put record %s: %w", key, err)
	}
	return store.Record{Key: key, Value: cloneValue(value), Version: version}, nil
}

// DeleteRecord implements store.Records in one read-write transaction.
func (s *Store) DeleteRecord(ctx context.Context, key string, expectVersion int64) error {
	if err := store.CheckKey(key); err != nil {
		return fmt.Errorf("delete record: %w", err)
	}
	err := s.update(ctx, func(b buckets) error {
		stored, err := storedVersion(b.records, key)
		if err != nil {
			return err
		}
		if stored == 0 {
			return store.ErrNotFound
		}
		if expectVersion >= 0 && expectVersion != stored {
			return check.RecordVersion(expectVersion, stored)
		}
		return b.records.Delete([]byte(key))
	})
	if err != nil {
		return fmt.Errorf("delete record %s: %w", key, err)
	}
	return nil
}

// Records implements store.Records: a cursor from the prefix on, in one
// read transaction (a snapshot). bbolt keeps keys in byte order, which is
// the order of Go strings.
func (s *Store) Records(ctx context.Context, prefix string) ([]store.Record, error) {
	if err := store.CheckPrefix(prefix); err != nil {
		return nil, fmt.Errorf("list records: %w", err)
	}
	var list []store.Record
	err := s.view(ctx, func(b buckets) error {
		c := b.records.Cursor()
		p := []byte(prefix)
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			rec, err := decodeRecord(string(k), v)
			if err != nil {
				return err
			}
			list = append(list, rec)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list records %q: %w", prefix, err)
	}
	return list, nil
}

// PutRecords implements store.RecordBatches in one read-write transaction
// (one fsync for the whole batch); a write whose version does not match is
// skipped with its conflict, the others are committed.
func (s *Store) PutRecords(ctx context.Context, writes []store.RecordWrite) ([]store.RecordResult, error) {
	if err := store.CheckRecordWrites(writes); err != nil {
		return nil, err
	}
	out := make([]store.RecordResult, len(writes))
	err := s.update(ctx, func(b buckets) error {
		for i, w := range writes {
			stored, err := storedVersion(b.records, w.Key)
			if err != nil {
				return fmt.Errorf("record %s: %w", w.Key, err)
			}
			if w.ExpectVersion >= 0 && w.ExpectVersion != stored {
				out[i] = store.RecordResult{Err: fmt.Errorf("put record %s: %w", w.Key, check.RecordVersion(w.ExpectVersion, stored))}
				continue
			}
			if err := b.records.Put([]byte(w.Key), encodeRecord(stored+1, w.Value)); err != nil {
				return fmt.Errorf("record %s: %w", w.Key, err)
			}
			out[i] = store.RecordResult{Record: store.Record{Key: w.Key, Value: cloneValue(w.Value), Version: stored + 1}}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("put %d records: %w", len(writes), err)
	}
	return out, nil
}
