package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/internal/check"
)

// recordPrefix starts the key of every record: vmeta:rec:<key> is a hash
// with the fields version and value. Record keys have no braces (see
// store.CheckKey), so each record hashes to a slot of its own on a Redis
// Cluster, and none of "*?[]\", so a prefix needs no escaping in a SCAN
// pattern.
const recordPrefix = prefix + "rec:"

func recordKey(key string) string { return recordPrefix + key }

// putRecordScript: KEYS[1] record; ARGV[1] expected version (<0: any),
// ARGV[2] value. Returns {"ok", version} or {"conflict", stored version}.
var putRecordScript = goredis.NewScript(`#!lua
local stored = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
local expect = tonumber(ARGV[1])
if expect >= 0 and expect ~= stored then
  return {'conflict', stored}
end
local version = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'value', ARGV[2])
return {'ok', version}
`)

// deleteRecordScript: KEYS[1] record; ARGV[1] expected version (<0: any).
// Returns {"ok"}, {"notfound"} or {"conflict", stored version}.
var deleteRecordScript = goredis.NewScript(`#!lua
local stored = redis.call('HGET', KEYS[1], 'version')
if not stored then
  return {'notfound'}
end
stored = tonumber(stored)
local expect = tonumber(ARGV[1])
if expect >= 0 and expect ~= stored then
  return {'conflict', stored}
end
redis.call('DEL', KEYS[1])
return {'ok'}
`)

// decodeRecord builds a record from HMGET version value, or returns
// store.ErrNotFound when the hash is missing.
func decodeRecord(key string, vals []any) (store.Record, error) {
	version, ok := vals[0].(string)
	if !ok {
		return store.Record{}, store.ErrNotFound
	}
	v, err := strconv.ParseInt(version, 10, 64)
	if err != nil {
		return store.Record{}, fmt.Errorf("decode version: %w", err)
	}
	value, _ := vals[1].(string)
	return store.Record{Key: key, Value: []byte(value), Version: v}, nil
}

// Record implements store.Records with one HMGET.
func (s *Store) Record(ctx context.Context, key string) (store.Record, error) {
	if err := store.CheckKey(key); err != nil {
		return store.Record{}, fmt.Errorf("record: %w", err)
	}
	rec, err := s.record(ctx, key)
	if err != nil {
		return store.Record{}, fmt.Errorf("record %s: %w", key, err)
	}
	return rec, nil
}

func (s *Store) record(ctx context.Context, key string) (store.Record, error) {
	if err := ctx.Err(); err != nil {
		return store.Record{}, err
	}
	vals, err := s.rdb.HMGet(ctx, recordKey(key), "version", "value").Result()
	if err != nil {
		return store.Record{}, err
	}
	return decodeRecord(key, vals)
}

// PutRecord implements store.Records with one script on the record's
// slot.
func (s *Store) PutRecord(ctx context.Context, key string, value []byte, expectVersion int64) (store.Record, error) {
	if err := store.CheckKey(key); err != nil {
		return store.Record{}, fmt.Errorf("put record: %w", err)
	}
	version, err := s.putRecord(ctx, key, value, expectVersion)
	if err != nil {
		return store.Record{}, fmt.Errorf("put record %s: %w", key, err)
	}
	return store.Record{Key: key, Value: append([]byte{}, value...), Version: version}, nil
}

func (s *Store) putRecord(ctx context.Context, key string, value []byte, expectVersion int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if value == nil {
		value = []byte{} // go-redis sends nil as an empty string too; be explicit
	}
	var res []any
	err := s.commit(ctx, recordKey(key), func(c writeConn) (bool, error) {
		var err error
		res, err = putRecordScript.Run(ctx, c, []string{recordKey(key)}, expectVersion, value).Slice()
		return err == nil && str(res, 0) == "ok", err
	})
	if errors.Is(err, ErrNotDurable) {
		return 0, err
	}
	if err != nil {
		return 0, fmt.Errorf("run put record script: %w", err)
	}
	n := num(res, 1)
	switch str(res, 0) {
	case "ok":
		return n, nil
	case "conflict":
		return 0, check.RecordVersion(expectVersion, n)
	default:
		return 0, fmt.Errorf("put record script: unexpected reply %v", res)
	}
}

// DeleteRecord implements store.Records with one script on the record's
// slot.
func (s *Store) DeleteRecord(ctx context.Context, key string, expectVersion int64) error {
	if err := store.CheckKey(key); err != nil {
		return fmt.Errorf("delete record: %w", err)
	}
	if err := s.deleteRecord(ctx, key, expectVersion); err != nil {
		return fmt.Errorf("delete record %s: %w", key, err)
	}
	return nil
}

func (s *Store) deleteRecord(ctx context.Context, key string, expectVersion int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var res []any
	err := s.commit(ctx, recordKey(key), func(c writeConn) (bool, error) {
		var err error
		res, err = deleteRecordScript.Run(ctx, c, []string{recordKey(key)}, expectVersion).Slice()
		return err == nil && str(res, 0) == "ok", err
	})
	if errors.Is(err, ErrNotDurable) {
		return err
	}
	if err != nil {
		return fmt.Errorf("run delete record script: %w", err)
	}
	switch str(res, 0) {
	case "ok":
		return nil
	case "notfound":
		return store.ErrNotFound
	case "conflict":
		return check.RecordVersion(expectVersion, num(res, 1))
	default:
		return fmt.Errorf("delete record script: unexpected reply %v", res)
	}
}

// Records implements store.Records: a SCAN of vmeta:rec:<prefix>* on every
// primary (as Instances does), then one pipelined HMGET per key found.
//
// SCAN rather than an index (a sorted set listed with ZRANGE BYLEX): an
// index is one more key, in a slot of its own on a Redis Cluster, so no
// script could change a record and its index entry together, and the two
// could disagree after a crash or a failover; every record write would
// also go through the index's one node. SCAN has nothing to keep in step
// and lists every record that exists for the whole call, on one server or
// on every primary of a cluster. Its cost grows with the number of keys
// in the database rather than with the records listed: fine for the
// registries, which operators list, not guests.
func (s *Store) Records(ctx context.Context, prefix string) ([]store.Record, error) {
	if err := store.CheckPrefix(prefix); err != nil {
		return nil, fmt.Errorf("list records: %w", err)
	}
	list, err := s.records(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("list records %q: %w", prefix, err)
	}
	return list, nil
}

func (s *Store) records(ctx context.Context, prefix string) ([]store.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	keys, err := s.scan(ctx, recordKey(prefix)+"*")
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, nil
	}
	slices.Sort(keys) // by record key: the prefix is common
	vals := make([]*goredis.SliceCmd, len(keys))
	if _, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, k := range keys {
			vals[i] = p.HMGet(ctx, k, "version", "value")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	list := make([]store.Record, 0, len(keys))
	for i, k := range keys {
		key := strings.TrimPrefix(k, recordPrefix)
		rec, err := decodeRecord(key, vals[i].Val())
		if errors.Is(err, store.ErrNotFound) {
			continue // deleted since the scan
		}
		if err != nil {
			return nil, fmt.Errorf("record %s: %w", key, err)
		}
		list = append(list, rec)
	}
	return list, nil
}

// num returns res[i] if it is an integer, 0 otherwise.
func num(res []any, i int) int64 {
	if i < len(res) {
		if n, ok := res[i].(int64); ok {
			return n
		}
	}
	return 0
}
