// Package logbudget bounds how many log lines one peer can cause: a
// daemon logs the refusals it answers (a 401, a 404 for an unknown
// caller), and a peer that sends thousands of refused requests would
// otherwise write thousands of lines. Each peer has a budget (a token
// bucket); past it, lines are counted instead of written, and the next
// line written for that peer says how many were suppressed.
package logbudget

import (
	"sync"
	"time"
)

// Defaults of New: 20 lines at once, then one a second per peer; at most
// MaxPeers peers tracked.
const (
	DefaultBurst    = 20
	DefaultInterval = time.Second
	MaxPeers        = 4096
)

// Budget is a token bucket of log lines per peer. Its zero value is not
// usable; make one with New. It is safe for concurrent use.
type Budget struct {
	burst    float64
	interval time.Duration
	now      func() time.Time

	mu     sync.Mutex
	peers  map[string]*bucket
	pruned time.Time // the last prune: at most one per interval
}

type bucket struct {
	tokens     float64
	last       time.Time
	suppressed int
}

// New returns a budget of burst lines per peer, refilled at one line per
// interval (DefaultBurst, DefaultInterval when zero); now is time.Now
// when nil.
func New(burst int, interval time.Duration, now func() time.Time) *Budget {
	if burst <= 0 {
		burst = DefaultBurst
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	if now == nil {
		now = time.Now
	}
	return &Budget{burst: float64(burst), interval: interval, now: now, peers: map[string]*bucket{}}
}

// overflow is the peer every new peer shares once MaxPeers are tracked
// and none of them is idle: the lines of a flood from many addresses are
// then bounded together.
const overflow = "(other peers)"

// Allow reports whether a line about peer may be written now. When it
// may, suppressed is how many lines about peer were not written since
// the last one that was (0 mostly); the caller adds it to the line.
func (b *Budget) Allow(peer string) (ok bool, suppressed int) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.peers[peer]
	if p == nil {
		if len(b.peers) >= MaxPeers && now.Sub(b.pruned) >= b.interval {
			b.prune(now)
		}
		if len(b.peers) >= MaxPeers {
			peer = overflow
			p = b.peers[peer]
		}
		if p == nil {
			p = &bucket{tokens: b.burst, last: now}
			b.peers[peer] = p
		}
	}
	if el := now.Sub(p.last); el > 0 {
		p.tokens = min(b.burst, p.tokens+float64(el)/float64(b.interval))
		p.last = now
	}
	if p.tokens < 1 {
		p.suppressed++
		return false, 0
	}
	p.tokens--
	suppressed, p.suppressed = p.suppressed, 0
	return true, suppressed
}

// prune drops the peers whose budget is full again and who have nothing
// suppressed to report. b.mu is held.
func (b *Budget) prune(now time.Time) {
	b.pruned = now
	for k, p := range b.peers {
		if p.suppressed == 0 && p.tokens+float64(now.Sub(p.last))/float64(b.interval) >= b.burst {
			delete(b.peers, k)
		}
	}
}
