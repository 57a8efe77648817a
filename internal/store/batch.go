package store

import (
	"context"
	"errors"
	"fmt"
)

// RecordBatches writes many versioned records in one call: what a
// procedure that rewrites thousands of records (a key-encryption key
// rotation rewrapping every secret) needs to be fast, without giving up
// the compare-and-swap of each record.
//
// Each write is PutRecord's compare-and-swap of one record, atomic on its
// own; the batch as a whole is not a transaction: some writes may succeed
// while others conflict. bolt commits a batch in one transaction (one
// fsync); Redis sends it as one pipeline of per-record scripts (on a
// Redis Cluster the pipeline is split by node, each record's script runs
// on its own slot).
type RecordBatches interface {
	// PutRecords applies writes (at most MaxRecordWrites, each key at
	// most once) and returns one result per write, in order: the record
	// as stored with its new version, or Err — ErrConflict (wrapped with
	// the key and both versions) when the stored version was not
	// ExpectVersion, in which case that record is unchanged. The error
	// return is for the call as a whole (invalid input, the store
	// unreachable): then any of the writes may or may not have been
	// applied (bolt: none was), as with a PutRecord that fails on a
	// broken connection, and the caller reads back before it retries.
	PutRecords(ctx context.Context, writes []RecordWrite) ([]RecordResult, error)
}

// RecordWrite is one compare-and-swap write of PutRecords; ExpectVersion
// follows PutRecord (0: must not exist, > 0: exactly, < 0: any).
type RecordWrite struct {
	Key           string
	Value         []byte
	ExpectVersion int64
}

// RecordResult is the outcome of one RecordWrite.
type RecordResult struct {
	// Record is the record as stored (when Err is nil).
	Record Record
	// Err is the write's own failure: ErrConflict, or (Redis with
	// min_replicas) a not-durable error for a write applied on the
	// primary only.
	Err error
}

// MaxRecordWrites bounds one PutRecords call: a bolt transaction and a
// Redis pipeline of that size stay well under a second and a few MB.
const MaxRecordWrites = 1024

// CheckRecordWrites validates a PutRecords call: 1 to MaxRecordWrites
// writes, valid keys, no key twice.
func CheckRecordWrites(writes []RecordWrite) error {
	if len(writes) == 0 || len(writes) > MaxRecordWrites {
		return fmt.Errorf("put records: %d writes, want 1 to %d", len(writes), MaxRecordWrites)
	}
	seen := make(map[string]struct{}, len(writes))
	for i, w := range writes {
		if err := CheckKey(w.Key); err != nil {
			return fmt.Errorf("put records: write %d: %w", i, err)
		}
		if _, dup := seen[w.Key]; dup {
			return fmt.Errorf("put records: write %d: key %s appears twice", i, w.Key)
		}
		seen[w.Key] = struct{}{}
	}
	return nil
}

// PutRecords writes through r's PutRecords when r has it (RecordBatches),
// and otherwise one PutRecord per write (a store wrapper or a test fake),
// with the same results.
func PutRecords(ctx context.Context, r Records, writes []RecordWrite) ([]RecordResult, error) {
	if b, ok := r.(RecordBatches); ok {
		return b.PutRecords(ctx, writes)
	}
	if err := CheckRecordWrites(writes); err != nil {
		return nil, err
	}
	out := make([]RecordResult, len(writes))
	for i, w := range writes {
		rec, err := r.PutRecord(ctx, w.Key, w.Value, w.ExpectVersion)
		if err != nil && !errors.Is(err, ErrConflict) {
			return nil, err
		}
		out[i] = RecordResult{Record: rec, Err: err}
	}
	return out, nil
}
