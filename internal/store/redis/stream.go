package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/vmeta/vmeta/internal/store"
)

// streamPrefix starts the key of every event stream: vmeta:stream:<name>
// is a Redis stream whose entries have one field, "event", the payload.
const streamPrefix = prefix + "stream:"

// StreamMaxLen is how many entries a stream keeps: older ones are trimmed
// (approximately, as XADD MAXLEN ~ does) so an unread stream cannot fill
// Redis's memory. Followers that fall this far behind lose the oldest.
const StreamMaxLen = 1_000_000

const streamField = "event"

var _ store.Streams = (*Store)(nil)

// Append adds payload to the stream (XADD), waiting for replicas as every
// other write does (see Durability).
func (s *Store) Append(ctx context.Context, stream string, payload []byte) (string, error) {
	if err := store.CheckStream(stream); err != nil {
		return "", fmt.Errorf("append to stream: %w", err)
	}
	key := streamPrefix + stream
	var id string
	err := s.commit(ctx, key, func(c writeConn) (bool, error) {
		var err error
		id, err = c.XAdd(ctx, &goredis.XAddArgs{
			Stream: key, MaxLen: StreamMaxLen, Approx: true,
			Values: []any{streamField, payload},
		}).Result()
		return err == nil, err
	})
	if err != nil {
		return "", fmt.Errorf("append to stream %s: %w", stream, err)
	}
	return id, nil
}

// ReadStream reads entries after the ID after (XREAD, blocking up to wait).
func (s *Store) ReadStream(ctx context.Context, stream, after string, limit int, wait time.Duration) ([]store.StreamEntry, error) {
	if err := store.CheckStream(stream); err != nil {
		return nil, fmt.Errorf("read stream: %w", err)
	}
	if after == "" {
		after = "0"
	}
	if limit <= 0 {
		limit = 100
	}
	block := time.Duration(-1) // no BLOCK argument
	if wait > 0 {
		block = max(wait, time.Millisecond)
	}
	res, err := s.rdb.XRead(ctx, &goredis.XReadArgs{
		Streams: []string{streamPrefix + stream, after}, Count: int64(limit), Block: block,
	}).Result()
	if errors.Is(err, goredis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read stream %s after %q: %w", stream, after, err)
	}
	var out []store.StreamEntry
	for _, st := range res {
		for _, m := range st.Messages {
			v, _ := m.Values[streamField].(string)
			out = append(out, store.StreamEntry{ID: m.ID, Payload: []byte(v)})
		}
	}
	return out, nil
}
