package bolt

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/internal/check"
)

var _ store.Groups = (*Store)(nil)

// GroupRecords implements store.Groups in one read transaction.
func (s *Store) GroupRecords(ctx context.Context, group string) ([]store.Record, error) {
	if err := store.CheckKey(group); err != nil {
		return nil, fmt.Errorf("group records: %w", err)
	}
	var list []store.Record
	err := s.view(ctx, func(b buckets) error {
		gb := b.groups.Bucket([]byte(group))
		if gb == nil {
			return nil
		}
		return gb.ForEach(func(k, v []byte) error {
			rec, err := decodeRecord(string(k), v)
			if err != nil {
				return err
			}
			list = append(list, rec)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("group %s records: %w", group, err)
	}
	return list, nil
}

// CommitGroup implements store.Groups in one read-write transaction that
// checks every op before it writes.
func (s *Store) CommitGroup(ctx context.Context, group string, ops []store.GroupOp) ([]store.Record, error) {
	if err := store.CheckGroupOps(group, ops); err != nil {
		return nil, fmt.Errorf("commit group: %w", err)
	}
	out := make([]store.Record, len(ops))
	err := s.update(ctx, func(b buckets) error {
		gb, err := b.groups.CreateBucketIfNotExists([]byte(group))
		if err != nil {
			return err
		}
		versions := make([]int64, len(ops))
		for i, op := range ops {
			stored, err := storedVersion(gb, op.Key)
			if err != nil {
				return fmt.Errorf("%s: %w", op.Key, err)
			}
			if (op.ExpectVersion >= 0 && op.ExpectVersion != stored) || (op.Delete && stored == 0) {
				return fmt.Errorf("%s: %w", op.Key, check.RecordVersion(op.ExpectVersion, stored))
			}
			versions[i] = stored
		}
		for i, op := range ops {
			switch {
			case op.Check:
				out[i] = store.Record{Key: op.Key, Version: versions[i]}
			case op.Delete:
				if err := gb.Delete([]byte(op.Key)); err != nil {
					return fmt.Errorf("%s: %w", op.Key, err)
				}
				out[i] = store.Record{Key: op.Key}
			default:
				if err := gb.Put([]byte(op.Key), encodeRecord(versions[i]+1, op.Value)); err != nil {
					return fmt.Errorf("%s: %w", op.Key, err)
				}
				out[i] = store.Record{Key: op.Key, Value: cloneValue(op.Value), Version: versions[i] + 1}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("commit group %s: %w", group, err)
	}
	return out, nil
}
