package server

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// A guest's connection remembers, between its requests, who the guest is
// and what it was served (issue 23 item 3). In a boot storm each request
// of a guest finds the server's data for that guest out of the CPU's
// caches: every cache line a request reads is a miss, about 1 % of the
// server's CPU time per request each (perf, 1,000 guests). Looking a
// guest up took several — its remote address parsed, the address index
// under the cache's lock (whose reader count moves between cores), the
// view, the view's directory array. The connection's first cache line is
// read by every request anyway (net/http reads and sets deadlines through
// limitedConn): what a request needs to find its view and directory is
// kept there.
//
// Only connections from a guest directly (limitedConn, not a trusted
// proxy's: those carry many guests) over HTTP/1 (one request at a time)
// have one.

// connMemo is what a connection's last request found: valid while the
// cache's generation is gen (cache.gen moves on every change that can make
// a looked-up view stale).
type connMemo struct {
	gen uint64
	// v is the view found for the connection's peer; nil: none
	// remembered. Only views whose policy lets a request without a token
	// through are remembered (so a request need not read the view to
	// know).
	v *view
	// bucket is v's rate-limit bucket, once one was taken from.
	bucket *bucket
	// dir is the directory of v served last (vdir.vers says for which
	// versions).
	dir *vdir
}

// viewBucket is l.viewBucket(v, now), remembered in m (nil: nothing
// remembered).
func (m *connMemo) viewBucket(l *rateLimiter, v *view, now time.Time) *bucket {
	if m == nil {
		return l.viewBucket(v, now)
	}
	if m.bucket == nil {
		m.bucket = l.viewBucket(v, now)
	}
	return m.bucket
}

// connContext is the context of a guest's connection (ConnContext of
// Server.HTTPServer): each request finds its connection's through its
// context.
type connContext struct {
	// memo comes first: it shares limitedConn's first cache line.
	memo connMemo
	context.Context
	// peer is the connection's remote address (unmapped, without zone);
	// direct: the peer is outside the trusted proxy networks, so it is
	// the guest (see identify).
	peer   netip.Addr
	direct bool
}

// connKey finds a request's connContext in its context.
type connKey struct{}

// Value returns the connContext itself for connKey, without reading it.
func (c *connContext) Value(key any) any {
	if key == (connKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// connContextFor is Server.HTTPServer's ConnContext: connections from
// LimitListener get their connContext (kept inside the limitedConn).
func (s *Server) connContextFor(ctx context.Context, c net.Conn) context.Context {
	lc, ok := c.(*limitedConn)
	if !ok {
		return ctx
	}
	cc := &lc.ctx
	cc.Context = ctx
	cc.direct = cc.peer.IsValid() && !s.trusted(cc.peer)
	return cc
}

// connOf returns the connContext of a request from a guest directly over
// HTTP/1, else nil.
func connOf(r *http.Request) *connContext {
	if r.ProtoMajor != 1 {
		return nil
	}
	cc, _ := r.Context().Value(connKey{}).(*connContext)
	if cc == nil || !cc.direct {
		return nil
	}
	return cc
}
