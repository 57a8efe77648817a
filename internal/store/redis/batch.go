package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/internal/check"
)

var _ store.RecordBatches = (*Store)(nil)

// PutRecords implements store.RecordBatches: one pipeline of the
// PutRecord script (EVALSHA, one per record, each atomic on its record's
// slot), so a batch costs one round trip rather than one per record. On a
// Redis Cluster go-redis splits the pipeline by node. When writes wait
// for replicas (min_replicas), the batch is sent per primary on one
// connection, followed by one WAIT on it that covers all of that
// primary's writes of the batch.
func (s *Store) PutRecords(ctx context.Context, writes []store.RecordWrite) ([]store.RecordResult, error) {
	if err := store.CheckRecordWrites(writes); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("put %d records: %w", len(writes), err)
	}
	out := make([]store.RecordResult, len(writes))
	if s.minReplicas <= 0 {
		if err := s.putRecordsOn(ctx, s.rdb, writes, indexes(len(writes)), out); err != nil {
			return nil, fmt.Errorf("put %d records: %w", len(writes), err)
		}
		return out, nil
	}
	groups, err := s.byPrimary(ctx, writes)
	if err != nil {
		return nil, fmt.Errorf("put %d records: %w", len(writes), err)
	}
	for _, g := range groups {
		if err := s.putRecordsDurable(ctx, g.key, writes, g.idx, out); err != nil {
			return nil, fmt.Errorf("put %d records: %w", len(writes), err)
		}
	}
	return out, nil
}

func indexes(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// primaryGroup is the writes of a batch that one primary holds; key is
// one of their record keys (to find the primary again).
type primaryGroup struct {
	key string
	idx []int
}

// byPrimary groups writes by the primary that holds them: one group on a
// single server or Sentinel's primary, one per node on a cluster.
func (s *Store) byPrimary(ctx context.Context, writes []store.RecordWrite) ([]primaryGroup, error) {
	c, ok := s.rdb.(*goredis.ClusterClient)
	if !ok {
		return []primaryGroup{{key: recordKey(writes[0].Key), idx: indexes(len(writes))}}, nil
	}
	var groups []primaryGroup
	at := map[string]int{}
	for i, w := range writes {
		node, err := c.MasterForKey(ctx, recordKey(w.Key))
		if err != nil {
			return nil, fmt.Errorf("find the primary of %s: %w", w.Key, err)
		}
		addr := node.Options().Addr
		g, ok := at[addr]
		if !ok {
			g = len(groups)
			at[addr] = g
			groups = append(groups, primaryGroup{key: recordKey(w.Key)})
		}
		groups[g].idx = append(groups[g].idx, i)
	}
	return groups, nil
}

// putRecordsDurable sends the writes idx on one connection to the primary
// that holds key, then WAITs there; a write applied but not acknowledged
// in time gets the not-durable error as its own.
func (s *Store) putRecordsDurable(ctx context.Context, key string, writes []store.RecordWrite, idx []int, out []store.RecordResult) error {
	conn, err := s.conn(ctx, key)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := s.putRecordsOn(ctx, conn, writes, idx, out); err != nil {
		return err
	}
	changed := false
	for _, i := range idx {
		changed = changed || out[i].Err == nil
	}
	if !changed {
		return nil
	}
	if err := s.wait(ctx, conn); err != nil {
		for _, i := range idx {
			if out[i].Err == nil {
				out[i] = store.RecordResult{Err: fmt.Errorf("put record %s: %w", writes[i].Key, err)}
			}
		}
	}
	return nil
}

// pipeliner is a client or one connection: what can run a pipeline and
// load a script.
type pipeliner interface {
	goredis.Scripter
	Pipelined(ctx context.Context, fn func(goredis.Pipeliner) error) ([]goredis.Cmder, error)
}

// putRecordsOn runs the PutRecord script for the writes idx in one
// pipeline on c and fills their results. Writes answered NOSCRIPT (the
// script is not yet cached on that server, or a failover brought a
// primary without it) are sent again in a second pipeline after the
// script is loaded.
func (s *Store) putRecordsOn(ctx context.Context, c pipeliner, writes []store.RecordWrite, idx []int, out []store.RecordResult) error {
	for attempt := 0; ; attempt++ {
		cmds := make([]*goredis.Cmd, len(idx))
		_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for j, i := range idx {
				w := writes[i]
				value := w.Value
				if value == nil {
					value = []byte{}
				}
				cmds[j] = putRecordScript.EvalSha(ctx, p, []string{recordKey(w.Key)}, w.ExpectVersion, value)
			}
			return nil
		})
		if err != nil && !isReply(err) {
			return err
		}
		var again []int
		for j, i := range idx {
			w := writes[i]
			res, err := cmds[j].Slice()
			if goredis.HasErrorPrefix(err, "NOSCRIPT") && attempt == 0 {
				again = append(again, i)
				continue
			}
			if err != nil {
				return fmt.Errorf("put record %s: run put record script: %w", w.Key, err)
			}
			switch str(res, 0) {
			case "ok":
				out[i] = store.RecordResult{Record: store.Record{Key: w.Key, Value: append([]byte{}, w.Value...), Version: num(res, 1)}}
			case "conflict":
				out[i] = store.RecordResult{Err: fmt.Errorf("put record %s: %w", w.Key, check.RecordVersion(w.ExpectVersion, num(res, 1)))}
			default:
				return fmt.Errorf("put record %s: put record script: unexpected reply %v", w.Key, res)
			}
		}
		if len(again) == 0 {
			return nil
		}
		if err := putRecordScript.Load(ctx, c).Err(); err != nil {
			return fmt.Errorf("load the put record script: %w", err)
		}
		idx = again
	}
}

// isReply reports whether err is an error reply of Redis to one command
// (which fails that command, not the connection).
func isReply(err error) bool {
	var r goredis.Error
	return errors.As(err, &r) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
