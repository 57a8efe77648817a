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
type rateLimiter struct {
	rate, burst float64
	now         func() time.Time

	buckets sync.Map // key -> *bucket
	n       atomic.Int64
	pruning sync.Mutex
}

// maxBuckets bounds the limiter's memory: past it, buckets that have
// refilled (idle callers) are dropped at once rather than at the next
// sweep.
const maxBuckets = 1 << 16

type bucket struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func newRateLimiter(rate float64, burst int, now func() time.Time) *rateLimiter {
	return &rateLimiter{rate: rate, burst: float64(burst), now: now}
}

// allow takes a token from key's bucket at time now. When there is none
// it returns false and how long until there is one.
func (l *rateLimiter) allow(key string, now time.Time) (bool, time.Duration) {
	return l.take(l.bucketOf(key, now), now)
}

// allowView is allow for the instance of a cached view: the view keeps
// its bucket (issue 23 item 3: looking it up by uuid was a hash and a
// walk of the limiter's map per request, cache misses in a boot storm).
// A bucket that prune drops from the map while a view holds it was full,
// as a new one would be: the view goes on with it.
func (l *rateLimiter) allowView(v *view, now time.Time) (bool, time.Duration) {
	b := v.bucket.Load()
	if b == nil {
		b = l.bucketOf(v.uuid, now)
		v.bucket.Store(b)
	}
	return l.take(b, now)
}

// bucketOf is key's bucket, made full at time now if it has none.
func (l *rateLimiter) bucketOf(key string, now time.Time) *bucket {
	v, ok := l.buckets.Load(key)
	if !ok {
		v, ok = l.buckets.LoadOrStore(key, &bucket{tokens: l.burst, last: now})
		if !ok && l.n.Add(1) > maxBuckets {
			l.prune()
		}
	}
	return v.(*bucket)
}

// take takes a token from b at time now (see allow).
func (l *rateLimiter) take(b *bucket, now time.Time) (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if el := now.Sub(b.last); el > 0 {
		b.tokens = math.Min(l.burst, b.tokens+el.Seconds()*l.rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

// prune drops the buckets that are full again: their callers have been
// idle long enough that a fresh bucket is the same.
func (l *rateLimiter) prune() {
	if !l.pruning.TryLock() {
		return
	}
	defer l.pruning.Unlock()
	now := l.now()
	l.buckets.Range(func(k, v any) bool {
		b := v.(*bucket)
		b.mu.Lock()
		full := b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst
		b.mu.Unlock()
		if full {
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
// remote IP address are open at once: a connection over the limit is
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
		return &limitedConn{Conn: c, l: l, addr: addr}, nil
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

type limitedConn struct {
	net.Conn
	l    *limitListener
	addr netip.Addr
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.addr) })
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
