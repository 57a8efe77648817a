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

// groupPrefix starts the key of every record group: vmeta:grp:{<group>} is
// one hash holding the whole group, the fields v:<key> (version) and
// d:<key> (value) per record. One key, so one slot on a Redis Cluster (the
// braces make the slot the group name's, explicitly), and one script
// changes any number of the group's records atomically.
const groupPrefix = prefix + "grp:"

func groupKey(group string) string { return groupPrefix + "{" + group + "}" }

var _ store.Groups = (*Store)(nil)

// commitGroupScript: KEYS[1] group hash; ARGV: n, then per op: key,
// expected version, kind ("put", "del", "chk"), value. Returns {"ok",
// version per op (0 for a delete, the stored one for a check)} or
// {"conflict", index (1-based), stored version}.
var commitGroupScript = goredis.NewScript(`#!lua
local n = tonumber(ARGV[1])
local stored = {}
for i = 1, n do
  local b = 1 + (i - 1) * 4
  local key, expect, kind = ARGV[b + 1], tonumber(ARGV[b + 2]), ARGV[b + 3]
  local v = tonumber(redis.call('HGET', KEYS[1], 'v:' .. key) or '0')
  if (expect >= 0 and expect ~= v) or (kind == 'del' and v == 0) then
    return {'conflict', i, v}
  end
  stored[i] = v
end
local out = {'ok'}
for i = 1, n do
  local b = 1 + (i - 1) * 4
  local key, kind = ARGV[b + 1], ARGV[b + 3]
  if kind == 'put' then
    redis.call('HSET', KEYS[1], 'v:' .. key, stored[i] + 1, 'd:' .. key, ARGV[b + 4])
    out[#out + 1] = stored[i] + 1
  elseif kind == 'del' then
    redis.call('HDEL', KEYS[1], 'v:' .. key, 'd:' .. key)
    out[#out + 1] = 0
  else
    out[#out + 1] = stored[i]
  end
end
return out
`)

// GroupRecords implements store.Groups with one HGETALL.
func (s *Store) GroupRecords(ctx context.Context, group string) ([]store.Record, error) {
	if err := store.CheckKey(group); err != nil {
		return nil, fmt.Errorf("group records: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("group %s records: %w", group, err)
	}
	h, err := s.rdb.HGetAll(ctx, groupKey(group)).Result()
	if err != nil {
		return nil, fmt.Errorf("group %s records: %w", group, err)
	}
	var list []store.Record
	for f, v := range h {
		key, ok := strings.CutPrefix(f, "v:")
		if !ok {
			continue
		}
		version, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("group %s record %s: decode version: %w", group, key, err)
		}
		list = append(list, store.Record{Key: key, Value: []byte(h["d:"+key]), Version: version})
	}
	slices.SortFunc(list, func(a, b store.Record) int { return strings.Compare(a.Key, b.Key) })
	return list, nil
}

// CommitGroup implements store.Groups with one script on the group's slot.
func (s *Store) CommitGroup(ctx context.Context, group string, ops []store.GroupOp) ([]store.Record, error) {
	if err := store.CheckGroupOps(group, ops); err != nil {
		return nil, fmt.Errorf("commit group: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("commit group %s: %w", group, err)
	}
	args := make([]any, 0, 1+4*len(ops))
	args = append(args, len(ops))
	for _, op := range ops {
		kind := "put"
		switch {
		case op.Delete:
			kind = "del"
		case op.Check:
			kind = "chk"
		}
		value := op.Value
		if value == nil {
			value = []byte{}
		}
		args = append(args, op.Key, op.ExpectVersion, kind, value)
	}
	key := groupKey(group)
	var res []any
	err := s.commit(ctx, key, func(c writeConn) (bool, error) {
		var err error
		res, err = commitGroupScript.Run(ctx, c, []string{key}, args...).Slice()
		return err == nil && str(res, 0) == "ok", err
	})
	if errors.Is(err, ErrNotDurable) {
		return nil, fmt.Errorf("commit group %s: %w", group, err)
	}
	if err != nil {
		return nil, fmt.Errorf("commit group %s: run script: %w", group, err)
	}
	switch str(res, 0) {
	case "ok":
	case "conflict":
		i := int(num(res, 1)) - 1
		if i < 0 || i >= len(ops) {
			return nil, fmt.Errorf("commit group %s: unexpected reply %v", group, res)
		}
		return nil, fmt.Errorf("commit group %s: %s: %w", group, ops[i].Key, check.RecordVersion(ops[i].ExpectVersion, num(res, 2)))
	default:
		return nil, fmt.Errorf("commit group %s: unexpected reply %v", group, res)
	}
	out := make([]store.Record, len(ops))
	for i, op := range ops {
		out[i] = store.Record{Key: op.Key, Version: num(res, i+1)}
		if !op.Delete && !op.Check {
			out[i].Value = append([]byte{}, op.Value...)
		}
	}
	return out, nil
}
