package server

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func rateSetup(t *testing.T, rate float64, burst int) (*Server, *fakeDocs, *clock) {
	t.Helper()
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	docs.publish(t, otherInstance(t))
	clk := newClock("2026-01-01")
	o := testOptions(clk.Now)
	o.RateLimit, o.RateBurst = rate, burst
	return New(docs, o), docs, clk
}

func TestRateLimit(t *testing.T) {
	s, _, clk := rateSetup(t, 0, 0) // the defaults: 50/s, burst 100
	const target = "/latest/meta-data/hostname"
	for i := range DefaultRateBurst {
		if r := get(s, target); r.status != 200 {
			t.Fatalf("request %d of the burst: %d", i+1, r.status)
		}
	}
	r := get(s, target)
	if r.status != 429 {
		t.Fatalf("request past the burst: %d, want 429", r.status)
	}
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After %q", r.header.Get("Retry-After"))
	}
	// The bucket is per instance, whichever address it calls from.
	if r := do(s, "GET", target, "[::1]:2"); r.status != 429 {
		t.Errorf("same instance, other address: %d, want 429", r.status)
	}
	// Other instances are unaffected.
	if r := do(s, "GET", target, otherAddr); r.status != 200 {
		t.Errorf("other instance: %d", r.status)
	}
	// "/" identifies nobody and is not limited.
	if r := get(s, "/"); r.status != 200 {
		t.Errorf("GET /: %d", r.status)
	}
	// One second refills DefaultRateLimit tokens.
	clk.Add(time.Second)
	for i := range DefaultRateLimit {
		if r := get(s, target); r.status != 200 {
			t.Fatalf("request %d after a second: %d", i+1, r.status)
		}
	}
	if r := get(s, target); r.status != 429 {
		t.Errorf("past the refill: %d, want 429", r.status)
	}
	// A long pause refills up to the burst, no more.
	clk.Add(time.Hour)
	n := 0
	for get(s, target).status == 200 {
		n++
	}
	if n != DefaultRateBurst {
		t.Errorf("after an hour idle: %d requests allowed, want %d", n, DefaultRateBurst)
	}
}

// TestRateLimitRetryAfter: the wait announced is the time to the next
// token, rounded up to whole seconds.
func TestRateLimitRetryAfter(t *testing.T) {
	s, _, _ := rateSetup(t, 0.25, 1) // one request per 4 s
	if r := get(s, "/latest/meta-data/hostname"); r.status != 200 {
		t.Fatal(r.status)
	}
	r := get(s, "/latest/meta-data/hostname")
	if r.status != 429 || r.header.Get("Retry-After") != "4" {
		t.Errorf("%d Retry-After %q, want 429 and 4", r.status, r.header.Get("Retry-After"))
	}
}

// TestCloudInitBootUnderDefaults replays what cloud-init fetches at boot
// (OpenStack datasource, then the EC2 tree as its fallback readers do,
// with a retry or two), all at the same instant: the default limit lets
// it all through.
func TestCloudInitBootUnderDefaults(t *testing.T) {
	s, _, _ := rateSetup(t, 0, 0)
	boot := []string{
		"/openstack", "/openstack/2018-08-27/meta_data.json", "/openstack/2018-08-27/meta_data.json",
		"/openstack/2018-08-27/user_data", "/openstack/2018-08-27/vendor_data.json",
		"/openstack/2018-08-27/vendor_data2.json", "/openstack/2018-08-27/network_data.json",
		"/", "/2009-04-04/meta-data/", "/2009-04-04/meta-data/ami-id", "/2009-04-04/meta-data/ami-launch-index",
		"/2009-04-04/meta-data/block-device-mapping/", "/2009-04-04/meta-data/block-device-mapping/ami",
		"/2009-04-04/meta-data/block-device-mapping/root", "/2009-04-04/meta-data/hostname",
		"/2009-04-04/meta-data/instance-id", "/2009-04-04/meta-data/local-hostname",
		"/2009-04-04/meta-data/local-ipv4", "/2009-04-04/meta-data/placement/",
		"/2009-04-04/meta-data/placement/availability-zone", "/2009-04-04/meta-data/public-keys/",
		"/2009-04-04/meta-data/public-keys/0/openssh-key", "/2009-04-04/meta-data/reservation-id",
		"/2009-04-04/meta-data/security-groups", "/2009-04-04/user-data",
	}
	if len(boot) != 25 {
		t.Fatalf("boot sequence has %d requests", len(boot))
	}
	for _, p := range boot {
		if r := get(s, p); r.status != 200 {
			t.Errorf("%s: %d", p, r.status)
		}
	}
}

// TestRateLimitUnknownCallers: callers the store does not know are
// limited by the address they come from, so they cannot drive store
// lookups at will.
func TestRateLimitUnknownCallers(t *testing.T) {
	s, docs, _ := rateSetup(t, 0, 0)
	before := docs.lookups.Load()
	var limited int
	for range 3 * DefaultRateBurst {
		switch r := do(s, "GET", "/latest/meta-data/hostname", "192.0.2.50:1"); r.status {
		case 404:
		case 429:
			limited++
		default:
			t.Fatalf("unknown caller: %d", r.status)
		}
	}
	if got := docs.lookups.Load() - before; got != DefaultRateBurst {
		t.Errorf("%d store lookups for an unknown address, want %d (the burst)", got, DefaultRateBurst)
	}
	if limited != 2*DefaultRateBurst {
		t.Errorf("%d requests limited", limited)
	}
	// The instances themselves are unaffected.
	if r := get(s, "/latest/meta-data/hostname"); r.status != 200 {
		t.Errorf("known instance: %d", r.status)
	}
}

func TestRateLimiterPrune(t *testing.T) {
	clk := newClock("2026-01-01")
	l := newRateLimiter(10, 5, clk.Now)
	for _, k := range []string{"a", "b", "c"} {
		l.allow(k, clk.Now())
	}
	for range 5 {
		l.allow("busy", clk.Now())
	}
	clk.Add(100 * time.Millisecond) // a, b, c refilled (4+1 = 5); busy has 1
	l.prune()
	n := 0
	l.buckets.Range(func(k, _ any) bool { n++; return true })
	if n != 1 || l.n.Load() != 1 {
		t.Errorf("%d buckets (%d counted) after prune, want only busy", n, l.n.Load())
	}
	if ok, _ := l.allow("busy", clk.Now()); !ok {
		t.Error("busy lost its refill")
	}
	if ok, _ := l.allow("busy", clk.Now()); ok {
		t.Error("busy got more than its refill")
	}
}

// dialFrom connects to addr from a given loopback source address.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByPeer reports whether the other end closed c (rather than just
// not writing). The deadline only bounds a broken test.
func closedByPeer(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	if err == nil {
		t.Fatal("the listener wrote to a connection")
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err)
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var rejected atomic.Int64
	exempt := netip.MustParseAddr("127.0.0.3")
	ln := LimitListener(inner, DefaultMaxConnsPerAddr, func(a netip.Addr) bool { return a == exempt }, func() { rejected.Add(1) })
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 256)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	addr := inner.Addr().String()
	take := func() net.Conn {
		select {
		case c := <-accepted:
			return c
		case <-time.After(5 * time.Second):
			t.Fatal("no connection accepted")
			return nil
		}
	}

	var server []net.Conn
	for range DefaultMaxConnsPerAddr {
		dialFrom(t, "127.0.0.1", addr)
		server = append(server, take())
	}
	ll := ln.(*limitListener)
	a1 := netip.MustParseAddr("127.0.0.1")
	if n := ll.openConns(a1); n != DefaultMaxConnsPerAddr {
		t.Fatalf("%d connections counted", n)
	}
	over := dialFrom(t, "127.0.0.1", addr)
	if !closedByPeer(t, over) {
		t.Errorf("connection %d from one address was not closed", DefaultMaxConnsPerAddr+1)
	}
	if rejected.Load() != 1 {
		t.Errorf("rejected %d, want 1", rejected.Load())
	}
	// Another address is not affected.
	other := dialFrom(t, "127.0.0.2", addr)
	take()
	if closedByPeer(t, other) {
		t.Error("a connection from another address was closed")
	}
	// Exempt peers are not counted.
	for range DefaultMaxConnsPerAddr + 5 {
		dialFrom(t, exempt.String(), addr)
		take()
	}
	if n := ll.openConns(exempt); n != 0 {
		t.Errorf("exempt address counted: %d", n)
	}
	// Closing a connection (twice: counted once) frees its slot.
	server[0].Close()
	server[0].Close()
	if n := ll.openConns(a1); n != DefaultMaxConnsPerAddr-1 {
		t.Errorf("after a close: %d counted", n)
	}
	again := dialFrom(t, "127.0.0.1", addr)
	take()
	if closedByPeer(t, again) {
		t.Error("a connection within the limit again was closed")
	}
	for _, c := range server[1:] {
		c.Close()
	}
	if n := ll.openConns(a1); n != 1 {
		t.Errorf("after closing all but one: %d counted", n)
	}
}

// TestServerLimitsEndToEnd runs the real http.Server of HTTPServer on
// Listener: keep-alive connections up to the limit are served, the next
// one is refused, and the refusal is counted in the metrics.
func TestServerLimitsEndToEnd(t *testing.T) {
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	o := testOptions(time.Now)
	o.MaxConnsPerAddr = 2
	s := New(docs, o)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := s.HTTPServer()
	go srv.Serve(s.Listener(inner))
	t.Cleanup(func() { srv.Close() })
	if srv.ReadHeaderTimeout != ReadHeaderTimeout || srv.MaxHeaderBytes != MaxHeaderBytes || srv.IdleTimeout == 0 || srv.WriteTimeout == 0 || srv.ReadTimeout == 0 {
		t.Errorf("http.Server limits: %+v", srv)
	}
	var conns []net.Conn
	for range 2 {
		c := dialFrom(t, "127.0.0.1", inner.Addr().String())
		conns = append(conns, c)
	}
	for _, c := range conns {
		if _, err := io.WriteString(c, "GET /latest/meta-data/hostname HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err != nil || !strings.Contains(string(buf[:n]), "200 OK") || !strings.Contains(string(buf[:n]), "web-1.novalocal") {
			t.Fatalf("keep-alive request: %v %q", err, buf[:n])
		}
	}
	third := dialFrom(t, "127.0.0.1", inner.Addr().String())
	if !closedByPeer(t, third) {
		t.Error("third connection from one address was not closed")
	}
	// Header limit: a request with > 16 KiB of headers is refused (431).
	c := dialFrom(t, "127.0.0.2", inner.Addr().String())
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", MaxHeaderBytes+8192)+"\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	n, _ := c.Read(buf)
	if !strings.Contains(string(buf[:n]), "431") {
		t.Errorf("oversized headers: %q", buf[:n])
	}
	if m := testutil.ToFloat64(s.metrics.connsRejected); m != 1 {
		t.Errorf("connections rejected metric %v, want 1", m)
	}
}

// TestRateLimitBucketKeptByView (issue 23 item 3): a cached instance's
// requests take from the bucket its view keeps — made when the view was
// warmed — not one looked up by uuid in the limiter's map per request:
// with the map emptied, the view's drained bucket still refuses.
func TestRateLimitBucketKeptByView(t *testing.T) {
	s, _, _ := rateSetup(t, 0.001, 2)
	s.warm(t.Context(), richUUID, []string{"10.0.0.5"})
	v := s.cache.byUUID(richUUID)
	if v == nil || v.bucket.Load() == nil {
		t.Fatal("the warmed view has no rate-limit bucket")
	}
	const target = "/latest/meta-data/hostname"
	for i := range 2 {
		if r := get(s, target); r.status != 200 {
			t.Fatalf("request %d of the burst: %d", i+1, r.status)
		}
	}
	s.limiter.buckets.Clear()
	if r := get(s, target); r.status != 429 {
		t.Errorf("past the burst, the limiter's map emptied: %d, want 429 (the view's bucket is drained)", r.status)
	}
}

// TestRateLimiterIsTokenBucket: the limiter's one-word buckets (the
// generic cell rate algorithm) allow, refuse and name the wait exactly as
// a bucket of burst tokens refilled at rate does, kept here in integer
// nanoseconds of credit (a token is 1/rate seconds of it), over random
// request times.
func TestRateLimiterIsTokenBucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 3))
	for _, tc := range []struct {
		rate  float64
		burst int
	}{{50, 100}, {1, 1}, {10, 5}, {4, 3}, {1000, 20}, {0.5, 2}, {3, 6}, {7, 1000}} {
		clk := newClock("2026-01-01")
		l := newRateLimiter(tc.rate, tc.burst, clk.Now)
		step := int64(float64(time.Second) / tc.rate)
		span := step * int64(tc.burst)
		credit := span // full
		last := clk.Now()
		for i := range 5000 {
			clk.Add(time.Duration(rng.Int64N(3 * step / 2)))
			now := clk.Now()
			credit = min(span, credit+int64(now.Sub(last)))
			last = now
			wantOK, wantWait := credit >= step, time.Duration(0)
			if wantOK {
				credit -= step
			} else {
				wantWait = time.Duration(step - credit)
			}
			ok, wait := l.allow("k", now)
			if ok != wantOK || wait != wantWait {
				t.Fatalf("rate %v burst %d, request %d: allow = %v, %v; the token bucket: %v, %v", tc.rate, tc.burst, i, ok, wait, wantOK, wantWait)
			}
		}
	}
}

// TestRateLimiterConcurrent: requests at the same instant from many
// goroutines take exactly the burst, however their updates interleave.
func TestRateLimiterConcurrent(t *testing.T) {
	clk := newClock("2026-01-01")
	l := newRateLimiter(1, 500, clk.Now)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if ok, _ := l.allow("k", clk.Now()); ok {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := allowed.Load(); n != 500 {
		t.Errorf("%d of 1600 requests allowed at one instant, want the burst, 500", n)
	}
}

// deadlineConn records the deadlines set on it.
type deadlineConn struct {
	net.Conn
	read, write []time.Time
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error  { c.read = append(c.read, t); return nil }
func (c *deadlineConn) SetWriteDeadline(t time.Time) error { c.write = append(c.write, t); return nil }
func (c *deadlineConn) SetDeadline(t time.Time) error {
	c.read, c.write = append(c.read, t), append(c.write, t)
	return nil
}

// TestLimitedConnDeadlines (issue 23 item 3): a deadline less than
// deadlineSlack later than the one set leaves the one set (net/http moves
// them after every request: a runtime timer moved each time); an earlier
// one, one later by the slack or more, and none at all are set. Read and
// write deadlines each.
func TestLimitedConnDeadlines(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	type step struct {
		t   time.Time
		set bool
	}
	reads := []step{
		{t0, true},                         // the first
		{t0.Add(time.Millisecond), false},  // the next request, 1 ms later
		{t0.Add(deadlineSlack - 1), false}, // still within the slack of t0
		{t0.Add(deadlineSlack), true},      // the slack: moved
		{t0, true},                         // earlier: set
		{time.Time{}, true},                // none: set
		{t0, true},                         // after none: set
		{t0.Add(60 * time.Second), true},   // idle: much later
		{t0.Add(-time.Hour), true},         // long ago (net/http's abort of a read)
		{t0.Add(-time.Hour + 1), false},    // a nanosecond later
	}
	writes := []step{
		{time.Time{}, true},                // none, none set: passed on
		{t0, true},                         // the first
		{t0.Add(time.Millisecond), false},  // the next request, 1 ms later
		{time.Time{}, false},               // none, after a response: the one set stays
		{t0.Add(deadlineSlack - 1), false}, // the next request, within the slack of t0
		{t0.Add(deadlineSlack), true},      // the slack: moved
		{t0, true},                         // earlier: set
		{t0.Add(60 * time.Second), true},   // much later
		{t0.Add(-time.Hour), true},         // long ago
		{t0.Add(-time.Hour + 1), false},    // a nanosecond later
	}
	for _, which := range []string{"read", "write"} {
		inner := &deadlineConn{}
		c := &limitedConn{Conn: inner}
		set, calls, steps := c.SetReadDeadline, &inner.read, reads
		if which == "write" {
			set, calls, steps = c.SetWriteDeadline, &inner.write, writes
		}
		for i, st := range steps {
			n := len(*calls)
			if err := set(st.t); err != nil {
				t.Fatal(err)
			}
			if got := len(*calls) > n; got != st.set {
				t.Errorf("%s deadline, step %d (%v): set %v, want %v", which, i, st.t, got, st.set)
			}
		}
		// SetDeadline is always passed on and counts as both.
		n := len(*calls)
		if err := c.SetDeadline(t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := set(t0.Add(time.Hour + time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if len(*calls) != n+1 {
			t.Errorf("%s: %d calls after SetDeadline and a deadline 1 ms later, want 1", which, len(*calls)-n)
		}
	}
}
