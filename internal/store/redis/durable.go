package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// ErrNotDurable is wrapped by the error of a write that the primary
// applied but that not enough replicas acknowledged in time (see
// WithReplicas): it is visible now, and may be lost if the primary fails
// before its replicas catch up. Reading it back tells whether it is still
// there; writing it again is safe.
var ErrNotDurable = errors.New("not durable")

// writeConn is what a write runs its command on: the shared client, or one
// connection of it when the write waits for replicas.
type writeConn interface {
	goredis.Scripter
	HSet(ctx context.Context, key string, values ...any) *goredis.IntCmd
	HDel(ctx context.Context, key string, fields ...string) *goredis.IntCmd
	XAdd(ctx context.Context, a *goredis.XAddArgs) *goredis.StringCmd
}

// Replicas returns how many replicas must acknowledge a write before the
// store reports it done (0: none, writes do not wait), and how long a write
// waits for them.
func (s *Store) Replicas() (n int, timeout time.Duration) {
	return s.minReplicas, s.replicaTimeout
}

// commit runs write, a command or script that changes keys of one slot
// (key is one of them), and reports write's error. When the store waits
// for replicas and write reports that it changed something (changed), it
// then sends WAIT on the same connection (WAIT counts the replicas that
// have every write of its own connection) and returns an error wrapping
// ErrNotDurable if too few acknowledged in time. On a cluster the
// connection is one to the primary that holds key.
func (s *Store) commit(ctx context.Context, key string, write func(c writeConn) (changed bool, err error)) error {
	if s.minReplicas <= 0 {
		_, err := write(s.rdb)
		return err
	}
	conn, err := s.conn(ctx, key)
	if err != nil {
		return err
	}
	defer conn.Close()
	changed, err := write(conn)
	if err != nil || !changed {
		return err
	}
	return s.wait(ctx, conn)
}

// commitShard is commit on a cluster, where each shard replicates on its
// own and a WAIT covers only the shard it is sent to; elsewhere it runs
// write without waiting, for a later commit's WAIT covers it (one
// primary replicates its writes in order).
func (s *Store) commitShard(ctx context.Context, key string, write func(c writeConn) (changed bool, err error)) error {
	if !s.cluster {
		_, err := write(s.rdb)
		return err
	}
	return s.commit(ctx, key, write)
}

// conn returns one connection to the primary that holds key.
func (s *Store) conn(ctx context.Context, key string) (*goredis.Conn, error) {
	switch c := s.rdb.(type) {
	case *goredis.Client: // one server, or the primary Sentinel names
		return c.Conn(), nil
	case *goredis.ClusterClient:
		node, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("find the primary of %s: %w", key, err)
		}
		return node.Conn(), nil
	default:
		return nil, fmt.Errorf("wait for replicas: unsupported client %T", s.rdb)
	}
}

// wait sends WAIT on conn, after a write on it.
func (s *Store) wait(ctx context.Context, conn *goredis.Conn) error {
	n, err := conn.Wait(ctx, s.minReplicas, s.replicaTimeout).Result()
	if err != nil {
		return fmt.Errorf("%w: written on the primary, but waiting for %d %s failed: %w",
			ErrNotDurable, s.minReplicas, plural(s.minReplicas, "replica"), err)
	}
	if n < int64(s.minReplicas) {
		return fmt.Errorf("%w: written on the primary but acknowledged by %d of %d %s within %s; it may be lost on failover",
			ErrNotDurable, n, s.minReplicas, plural(s.minReplicas, "replica"), s.replicaTimeout)
	}
	return nil
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
