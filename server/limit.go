package server

import (
	"math"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// rateLimiter is a token bucket per key (an instance UUID, or for callers
// not yet identified the address or id they claim): rate tokens per second
// up to burst; a request takes one.
//
// Each bucket is kept as the generic cell rate algorithm does, in one
// atomic word: its theoretical arrival time, when it will be full again
// (issue 23 item 3: a request takes no lock and does no floating-point
// arithmetic; a bucket's lock and unlock were two atomic operations on a
// line that a boot storm finds out of the caches). A bucket full at time
// t has tat <= t; taking a token moves tat to max(tat, t) + step; a
// request is refused when that would put tat more than burst steps ahead
// of t — as a bucket of burst tokens refilled at rate refuses one when
// fewer than one token is left.
type rateLimiter struct {
	now    func() time.Time
	origin time.Time // times are kept in nanoseconds since origin
	step   int64     // nanoseconds per token: 1/rate
	span   int64     // burst × step: how far ahead of now tat may go

	buckets sync.Map // key -> *bucket
	n       atomic.Int64
	pruning sync.Mutex
}

// maxBuckets bounds the limiter's memory: past it, buckets that have
// refilled (idle callers) are dropped at once rather than at the next
// sweep.
const maxBuckets = 1 << 16

type bucket struct {
	tat atomic.Int64 // theoretical arrival time, in nanoseconds since the limiter's origin
}

func newRateLimiter(rate float64, burst int, now func() time.Time) *rateLimiter {
	step := int64(math.Min(float64(time.Second)/rate, math.MaxInt64/4))
	span := int64(math.Min(float64(step)*float64(burst), math.MaxInt64/4)) // exactly burst steps
	return &rateLimiter{now: now, origin: now(), step: step, span: span}
}

// at is t in nanoseconds since the limiter's origin (monotonic when both
// have a monotonic reading).
func (l *rateLimiter) at(t time.Time) int64 { return int64(t.Sub(l.origin)) }

// allow takes a token from key's bucket at time now. When there is none
// it returns false and how long until there is one.
func (l *rateLimiter) allow(key string, now time.Time) (bool, time.Duration) {
	return l.take(l.bucketOf(key, now), now)
}

// viewBucket is the rate-limit bucket of a cached view's instance, which
// the view keeps (issue 23 item 3: looking it up by uuid was a hash and a
// walk of the limiter's map per request, cache misses in a boot storm).
// A bucket that prune drops from the map while a view holds it was full,
// as a new one would be: the view goes on with it.
func (l *rateLimiter) viewBucket(v *view, now time.Time) *bucket {
	b := v.bucket.Load()
	if b == nil {
		b = l.bucketOf(v.uuid, now)
		v.bucket.Store(b)
	}
	return b
}

// bucketOf is key's bucket, made full at time now if it has none.
func (l *rateLimiter) bucketOf(key string, now time.Time) *bucket {
	v, ok := l.buckets.Load(key)
	if !ok {
		b := &bucket{}
		b.tat.Store(l.at(now))
		v, ok = l.buckets.LoadOrStore(key, b)
		if !ok && l.n.Add(1) > maxBuckets {
			l.prune()
		}
	}
	return v.(*bucket)
}

// take takes a token from b at time now (see allow).
func (l *rateLimiter) take(b *bucket, now time.Time) (bool, time.Duration) {
	t := l.at(now)
	for {
		tat := b.tat.Load()
		next := max(tat, t) + l.step
		if ahead := next - t; ahead > l.span {
			return false, time.Duration(ahead - l.span)
		}
		if b.tat.CompareAndSwap(tat, next) {
			return true, 0
		}
	}
}

// prune drops the buckets that are full again: their callers have been
// idle long enough that a fresh bucket is the same.
func (l *rateLimiter) prune() {
	if !l.pruning.TryLock() {
		return
	}
	defer l.pruning.Unlock()
	now := l.at(l.now())
	l.buckets.Range(func(k, v any) bool {
		if full := v.(*bucket).tat.Load() <= now; full {
			l.buckets.Delete(k)
			l.n.Add(-1)
		}
		return true
	})
}

// retryAfter renders a wait as Retry-After seconds (at least 1).
func retryAfter(d time.Duration) int {
	s := int(math.Ceil(d.Seconds()))
	return max(s, 1)
}

// LimitListener wraps ln so that at most perAddr connections from one
// remote IP address are open at once (perAddr < 0: no limit; the
// connections are still wrapped, for their connContext): a connection over the limit is
// closed as soon as it is accepted (the client sees a reset or EOF), and
// Accept goes on with the next one. A slot is released when its
// connection is closed. Peers for which exempt returns true (trusted
// proxies, which carry many guests) are not counted. rejected, when set,
// is called for each refused connection. Connections whose remote
// address is not an IP address (unix sockets) are not limited.
func LimitListener(ln net.Listener, perAddr int, exempt func(netip.Addr) bool, rejected func()) net.Listener {
	return &limitListener{Listener: ln, max: perAddr, exempt: exempt, rejected: rejected, open: map[netip.Addr]int{}}
}

type limitListener struct {
	net.Listener
	max      int
	exempt   func(netip.Addr) bool
	rejected func()

	mu   sync.Mutex
	open map[netip.Addr]int
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr, ok := connAddr(c)
		if !ok || (l.exempt != nil && l.exempt(addr)) {
			return c, nil
		}
		if l.max < 0 {
			return newLimitedConn(c, addr, nil), nil // not counted
		}
		l.mu.Lock()
		if l.open[addr] >= l.max {
			l.mu.Unlock()
			if l.rejected != nil {
				l.rejected()
			}
			c.Close()
			continue
		}
		l.open[addr]++
		l.mu.Unlock()
		return newLimitedConn(c, addr, l), nil
	}
}

func (l *limitListener) release(a netip.Addr) {
	l.mu.Lock()
	if l.open[a] <= 1 {
		delete(l.open, a)
	} else {
		l.open[a]--
	}
	l.mu.Unlock()
}

// openConns returns how many connections from a are counted (for tests).
func (l *limitListener) openConns(a netip.Addr) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[a]
}

func connAddr(c net.Conn) (netip.Addr, bool) {
	switch a := c.RemoteAddr().(type) {
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap().WithZone(""), true
	case nil:
		return netip.Addr{}, false
	default:
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return netip.Addr{}, false
		}
		return ap.Addr().Unmap().WithZone(""), true
	}
}

// limitedConn is a connection LimitListener counts. Its first cache
// line holds what every request reads: the connection (each Read), the
// deadlines (net/http sets them per request) and the memo of its
// connContext (connmemo.go; TestLimitedConnLayout).
type limitedConn struct {
	net.Conn
	// rdl and wdl are the read and write deadlines set, in Unix
	// nanoseconds (0: none).
	rdl, wdl atomic.Int64
	// ctx is the connection's context, when the server's ConnContext
	// made it (Server.HTTPServer); ctx.peer is the remote address.
	ctx connContext

	l        *limitListener // nil: not counted
	released atomic.Bool
}

func newLimitedConn(c net.Conn, addr netip.Addr, l *limitListener) *limitedConn {
	lc := &limitedConn{Conn: c, l: l}
	lc.ctx.peer = addr
	return lc
}

// deadlineSlack is how much later than the deadline already set a new
// one may be and still leave the connection with the one set. net/http
// moves the write deadline to WriteTimeout after each request's start,
// and the read deadline to ReadTimeout once the headers are read (the
// header deadline, ReadHeaderTimeout, was set a moment before: with
// ReadTimeout equal to it, the two are microseconds apart); a guest's
// requests come milliseconds apart, and each move is a runtime timer
// moved, in a boot storm among thousands (cache misses: issue 23 item 3).
// Keeping the earlier deadline makes a limit at most this much stricter
// than asked, never looser.
const deadlineSlack = time.Second

// keep reports whether deadline t (Unix nanoseconds, 0: none) may be left
// as set, the one set being set (see deadlineSlack).
func keep(set, t int64) bool {
	return set != 0 && t != 0 && t >= set && t-set < int64(deadlineSlack)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// SetReadDeadline sets the read deadline, unless t is less than
// deadlineSlack later than the one set. An earlier deadline, and no
// deadline (zero t), are always set.
func (c *limitedConn) SetReadDeadline(t time.Time) error {
	n := unixNano(t)
	if keep(c.rdl.Load(), n) {
		return nil
	}
	if err := c.Conn.SetReadDeadline(t); err != nil {
		return err
	}
	c.rdl.Store(n)
	return nil
}

// SetWriteDeadline is SetReadDeadline for the write deadline, except that
// a zero t (no deadline) leaves the one set: net/http clears the write
// deadline after each response and sets the next request's before its
// response is written (nothing is written in between), so that a
// keep-alive connection's write deadline, kept, is moved only by the
// slack rule — not removed and added again, two runtime timer changes,
// per request (issue 23 item 3).
func (c *limitedConn) SetWriteDeadline(t time.Time) error {
	n := unixNano(t)
	set := c.wdl.Load()
	if keep(set, n) || (n == 0 && set != 0) {
		return nil
	}
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	c.wdl.Store(n)
	return nil
}

// SetDeadline sets both deadlines, always.
func (c *limitedConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetDeadline(t); err != nil {
		return err
	}
	n := unixNano(t)
	c.rdl.Store(n)
	c.wdl.Store(n)
	return nil
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	if c.l != nil && c.released.CompareAndSwap(false, true) {
		c.l.release(c.ctx.peer)
	}
	return err
}

// CloseWrite lets net/http half-close the connection as it would the bare
// TCP connection.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
