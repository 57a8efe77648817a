// Package feed delivers store.Change values to one watcher (the channel
// Store.Watch returns) without ever blocking the writer that produces them.
//
// A Sink has a buffered channel. Send never blocks: when the buffer is full
// the change is dropped and a Change{Resync: true} is owed to the watcher
// instead, delivered by the sink's own goroutine as soon as the watcher
// makes room. A watcher that falls behind therefore loses changes but
// always learns that it did, which is the contract of Store.Watch. Both
// backends use it: bolt fans its in-process changes out to one Sink per
// watcher, redis feeds one Sink from each subscription.
package feed

import (
	"context"
	"sync"

	"github.com/vmeta/vmeta/internal/store"
)

// DefaultSize is the buffer of a watcher's channel: enough for a burst of
// publishes (a host re-applying every instance) without a resync.
const DefaultSize = 1024

// Sink is one watcher's channel.
type Sink struct {
	out    chan store.Change
	owed   chan struct{} // capacity 1: a Resync is owed
	stop   chan struct{}
	once   sync.Once
	mu     sync.Mutex // guards closed, and orders Send against close(out)
	closed bool
}

// New returns a Sink with a buffer of size changes and starts its
// goroutine, which closes the channel when ctx is done or Close is called.
// onClose, if not nil, runs first (a backend unregisters the sink there).
func New(ctx context.Context, size int, onClose func()) *Sink {
	if size < 1 {
		size = 1
	}
	s := &Sink{
		out:  make(chan store.Change, size),
		owed: make(chan struct{}, 1),
		stop: make(chan struct{}),
	}
	go s.run(ctx, onClose)
	return s
}

// C is the watcher's end.
func (s *Sink) C() <-chan store.Change { return s.out }

// Send queues c without blocking; if the buffer is full, c is dropped and a
// Resync is owed instead. After the sink is closed Send does nothing.
func (s *Sink) Send(c store.Change) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	select {
	case s.out <- c:
	default:
		s.owe()
	}
}

// Resync queues a Change{Resync: true} (the watcher may have missed
// changes), in order with Send if there is room, else as soon as there is.
func (s *Sink) Resync() { s.Send(store.Change{Resync: true}) }

func (s *Sink) owe() {
	select {
	case s.owed <- struct{}{}:
	default: // already owed
	}
}

// Close closes the sink (idempotent); its channel is closed shortly after.
func (s *Sink) Close() { s.once.Do(func() { close(s.stop) }) }

// Done is closed when the sink is closed (by Close or its context).
func (s *Sink) Done() <-chan struct{} { return s.stop }

func (s *Sink) run(ctx context.Context, onClose func()) {
	defer func() {
		s.Close()
		if onClose != nil {
			onClose()
		}
		s.mu.Lock()
		s.closed = true
		close(s.out)
		s.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stop:
			return
		case <-s.owed:
			select {
			case s.out <- store.Change{Resync: true}:
			case <-ctx.Done():
				return
			case <-s.stop:
				return
			}
		}
	}
}
