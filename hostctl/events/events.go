// Package events is hostctl's audit stream: the events other tools follow
// (a share attached or detached, a one-time-use device burned and
// released). Every event is written as an audit log line and appended to
// a named stream: a Redis stream when the store is Redis (store.Streams;
// every host's events in one place), otherwise an append-only JSON-lines
// file per stream in the host's data directory.
//
// An event carries only what its emitter puts in Payload: callers keep
// secrets and admin-only fields (a share's export location) out of it.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/vmeta/vmeta/internal/store"
)

// Event is one entry of a stream.
type Event struct {
	// ID is the entry's position in its stream, set when read (Redis
	// stream IDs, or "<line>" for a file); pass it to Read to continue.
	ID string `json:"id,omitempty"`
	// Time the event was emitted, UTC.
	Time time.Time `json:"time"`
	// Host that emitted it.
	Host string `json:"host"`
	// Type names what happened: "share.attached", "device.burned", ….
	Type string `json:"type"`
	// Payload is the event's body (the emitter's JSON).
	Payload json.RawMessage `json:"payload,omitempty"`
}

// Log emits events for one host and reads streams back.
type Log struct {
	host    string
	streams store.Streams
	log     *slog.Logger
	now     func() time.Time
}

// New returns a Log that appends to streams (a store.Streams: the Redis
// store, or a Files for the embedded store) for host, writing each event
// as an audit line on log too.
func New(streams store.Streams, host string, log *slog.Logger) *Log {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Log{host: host, streams: streams, log: log, now: time.Now}
}

// For returns the event streams for st: st's own when it has them (Redis),
// otherwise JSON-lines files in dir.
func For(st any, dir string) store.Streams {
	if s, ok := st.(store.Streams); ok {
		return s
	}
	return NewFiles(dir)
}

// Read returns up to limit events of stream after the event with ID
// after, waiting up to wait for one (see the package function Read).
func (l *Log) Read(ctx context.Context, stream, after string, limit int, wait time.Duration) ([]Event, error) {
	return Read(ctx, l.streams, stream, after, limit, wait)
}

// Emit appends an event of type typ with payload (marshalled to JSON) to
// stream, after writing it as an audit line. It returns the event as
// stored, with its ID. An event that cannot be appended is still in the
// log, and the error says so.
func (l *Log) Emit(ctx context.Context, stream, typ string, payload any) (Event, error) {
	body, err := json.Marshal(payload)
	if err != nil {
		return Event{}, fmt.Errorf("event %s: encode payload: %w", typ, err)
	}
	ev := Event{Time: l.now().UTC(), Host: l.host, Type: typ, Payload: body}
	line, err := json.Marshal(ev)
	if err != nil {
		return Event{}, fmt.Errorf("event %s: %w", typ, err)
	}
	l.log.Info("audit event", "stream", stream, "type", typ, "host", l.host, "payload", string(body))
	id, err := l.streams.Append(ctx, stream, line)
	if err != nil {
		l.log.Error("audit event not appended to its stream", "stream", stream, "type", typ, "err", err)
		return ev, fmt.Errorf("event %s: %w", typ, err)
	}
	ev.ID = id
	return ev, nil
}

// Read returns up to limit events of stream after the event with ID after
// ("" for the first), waiting up to wait for one when there are none.
// Entries that are not events (written by something else) are an error
// naming their ID, so a follower never skips one silently.
func Read(ctx context.Context, s store.Streams, stream, after string, limit int, wait time.Duration) ([]Event, error) {
	entries, err := s.ReadStream(ctx, stream, after, limit, wait)
	if err != nil {
		return nil, err
	}
	out := make([]Event, 0, len(entries))
	var errs []error
	for _, e := range entries {
		var ev Event
		if err := json.Unmarshal(e.Payload, &ev); err != nil {
			errs = append(errs, fmt.Errorf("stream %s entry %s: not an event: %w", stream, e.ID, err))
			continue
		}
		ev.ID = e.ID
		out = append(out, ev)
	}
	return out, errors.Join(errs...)
}

// StreamInstances is the stream of instance events: the core's and the
// operations' changes, the shares' instance updates, the NICs' address
// reports.
const StreamInstances = "instances"
