// Package server is vmeta's guest-facing metadata service: it identifies the
// calling guest, and serves that guest's published tree with Nova's paths,
// listings, content types and status codes, so cloud-init's OpenStack and
// EC2 readers work unchanged.
//
// The host renders each tree once (internal/metadata); the server only
// looks bytes up. Each instance's tree is read on first use and cached
// until the instance changes (see cache.go: Invalidate, the store's change
// feed, a convergence sweep): its files kept deflated, each version's
// table of servable paths built from them when the version is first asked
// for (see view.go).
//
// Who is asking: the source address (the store's address index), or, from
// a trusted proxy network only, Nova's signed proxy headers (X-Instance-ID,
// X-Tenant-ID, X-Instance-ID-Signature) when a proxy secret is configured,
// else the X-Forwarded-For entry the proxy added (identify.go). Session tokens
// (PUT /latest/api/token, IMDSv2 style) can be optional or required.
//
// Limits and their defaults (Options; none of them bothers cloud-init,
// which makes about 20 requests at boot):
//
//   - per-instance rate limit: a token bucket of DefaultRateBurst (100)
//     requests refilled at DefaultRateLimit (50) per second; over it, 429
//     with Retry-After. Callers not yet identified (cache misses) are
//     limited the same way by the address or instance id they claim, so
//     unknown addresses cannot hammer the store.
//   - at most DefaultMaxConnsPerAddr (64) open connections per source
//     address (Listener; trusted proxies exempt).
//   - headers: MaxHeaderBytes (16 KiB); ReadHeaderTimeout and
//     ReadTimeout (the whole request, a password's body included) 5 s,
//     WriteTimeout 10 s, IdleTimeout 60 s (HTTPServer; on Listener's
//     connections a deadline stays put while a new one would move it
//     later by less than a second, so it may be up to 1 s earlier).
//   - password POST bodies: MaxPasswordBytes (1020, Nova's limit; more is
//     400), never reading more than 4 KiB.
//   - store reads time out after DefaultStoreTimeout (3 s): 503.
//
// Operability: MetricsHandler (/metrics, /healthz) for a separate
// listener that guests cannot reach (the guest listener has no /healthz:
// the store's state is the operator's business), and an access log line per request (Options.AccessLog) that never holds
// a query string, a header, a body, user data, a password or a token.
package server

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmeta/vmeta/internal/clip"
	"github.com/vmeta/vmeta/internal/logbudget"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/store"
)

// Documents is what the server needs from a store (store.Store has it).
type Documents interface {
	// LookupAddress returns the UUID of the instance owning a source
	// address, or store.ErrNotFound.
	LookupAddress(ctx context.Context, addr string) (string, error)
	// Document returns an instance's published document.
	Document(ctx context.Context, uuid string) (store.Document, error)
	// DocumentVersion returns the version of a published document.
	DocumentVersion(ctx context.Context, uuid string) (int64, error)
	// Password returns the password a guest posted (store.ErrNotFound:
	// none); SetPassword stores it once (store.ErrConflict after).
	Password(ctx context.Context, uuid string) ([]byte, error)
	SetPassword(ctx context.Context, uuid string, password []byte) error
	// Ping reports whether the store is reachable.
	Ping(ctx context.Context) error
}

// Watcher is a store with a change feed (store.Store has one); Run follows
// it.
type Watcher interface {
	Watch(ctx context.Context) (<-chan store.Change, error)
}

// LosslessWatcher is a Watcher whose feed loses no change unsaid: each
// change is delivered, or a Change{Resync: true} follows the loss (the
// embedded store's in-process feed). Run then sweeps the cache when the
// feed asks and at each subscription, and its periodic tick only checks
// that the store answers: a sweep reads the version of every cached
// document (with a thousand guests cached, 20 ms of CPU time every
// SweepInterval, landing in whatever requests are being served: issue 23
// item 3).
type LosslessWatcher interface {
	Watcher
	LosslessFeed() bool
}

// Defaults of Options.
const (
	DefaultRateLimit       = 50 // requests per second and instance
	DefaultRateBurst       = 100
	DefaultMaxConnsPerAddr = 64
	DefaultSweepInterval   = 5 * time.Second
	DefaultStoreTimeout    = 3 * time.Second
)

// Limits of the guest-facing HTTP server (HTTPServer).
const (
	MaxHeaderBytes    = 16 << 10
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = ReadHeaderTimeout // see limitedConn's deadlineSlack
	WriteTimeout      = 10 * time.Second
	IdleTimeout       = 60 * time.Second
)

// Options configure a Server. The zero value serves by source address
// only, with optional tokens and the default limits.
type Options struct {
	Logger *slog.Logger
	// Now returns the current time: the /openstack listing hides versions
	// dated after today (UTC), tokens expire, rate-limit buckets refill.
	// time.Now when nil.
	Now func() time.Time

	// TrustedProxies are the networks whose peers may name the guest with
	// proxy headers or X-Forwarded-For. Empty: nobody may.
	TrustedProxies []netip.Prefix
	// ProxySecrets verify X-Instance-ID-Signature. Without a secret,
	// X-Instance-ID is never honoured (X-Forwarded-For from a trusted
	// proxy still is).
	ProxySecrets Secrets

	// TokenKeys sign (current key) and verify (all keys) session tokens.
	// Nil: a random key of this process (tokens then die with it, and
	// other replicas do not accept them).
	TokenKeys Secrets
	// TokenPolicy is the host's default; "" is TokenOptional.
	TokenPolicy TokenPolicy

	// KeyFiles are the key files ProxySecrets and TokenKeys were loaded
	// from (Config.Options makes them): Run reloads them when the store's
	// change feed says a key rotated (store.Change.Key) or may have
	// missed it (Resync), and every KeyCheckInterval; ReloadKeys reloads
	// them at once (SIGHUP).
	KeyFiles []*KeyFile
	// KeyCheckInterval is how often Run compares the key files with what
	// is loaded (0: DefaultKeyCheckInterval; negative: never).
	KeyCheckInterval time.Duration
	// KeyReaderID names this reader in its record of the key generations
	// it has loaded (see KeyReaderPrefix; "": host name and process id);
	// KeyReaderHeartbeat is how often the record is rewritten (0:
	// DefaultKeyReaderHeartbeat). Only with KeyFiles and a store that
	// keeps records.
	KeyReaderID        string
	KeyReaderHeartbeat time.Duration
	// InstanceTokenPolicy, when set, may give an instance its own policy
	// ("" keeps the host's). It is asked once per published version of an
	// instance (when its view is built), with its document: the seam
	// through which a per-instance setting in the instance spec will
	// arrive. See TokenPolicyMap for a fixed table.
	InstanceTokenPolicy func(doc store.Document) TokenPolicy
	// Rand supplies token nonces; crypto/rand when nil.
	Rand io.Reader

	// RateLimit is requests per second per instance (0: DefaultRateLimit;
	// negative: no limit); RateBurst the bucket size (0:
	// DefaultRateBurst).
	RateLimit float64
	RateBurst int
	// MaxConnsPerAddr bounds open connections per source address in
	// Listener (0: DefaultMaxConnsPerAddr; negative: no limit).
	MaxConnsPerAddr int
	// StoreTimeout bounds each store read (0: DefaultStoreTimeout).
	StoreTimeout time.Duration
	// SweepInterval is how often Run compares cached versions with the
	// store's (0: DefaultSweepInterval; negative: never).
	SweepInterval time.Duration
	// WarmInstances is how many of the store's instances Run reads into
	// the cache when it starts, ahead of their guests (warm.go; 0:
	// DefaultWarmInstances; negative: none).
	WarmInstances int

	// Metrics turns on per-request metrics (count by path class and
	// status, latency); cache and store counters are always kept.
	Metrics bool
	// Registry receives the server's metrics and is what MetricsHandler
	// serves, with whatever else the caller registers on it (hostctl's
	// own metrics); nil: a registry of the server's own, from
	// NewRegistry. A registry serves one Server.
	Registry *prometheus.Registry
	// AccessLog logs one line per request at level Info.
	AccessLog bool

	// GCHeapFloor, when positive, keeps the process's heap goal at least
	// this many bytes above its live heap while Run runs (gcfloor.go;
	// process-wide: one floor per process; off when GOGC or GOMEMLIMIT
	// is set in the environment). 0: none (the commands default to
	// DefaultGCHeapFloor).
	GCHeapFloor int64
}

// TokenPolicyMap returns an InstanceTokenPolicy from a table of instance
// UUIDs.
func TokenPolicyMap(m map[string]TokenPolicy) func(store.Document) TokenPolicy {
	return func(doc store.Document) TokenPolicy { return m[doc.InstanceUUID] }
}

// Server serves metadata over HTTP. It is an http.Handler.
type Server struct {
	docs          Documents
	log           *slog.Logger
	now           func() time.Time
	realClock     bool // now is time.Now: ServeHTTP's start time can stand in for it
	storeTimeout  time.Duration
	sweepInterval time.Duration
	maxConns      int

	trustedProxies []netip.Prefix
	proxySecrets   Secrets
	tokens         tokenMinter
	policy         TokenPolicy
	instancePolicy func(store.Document) TokenPolicy
	limiter        *rateLimiter // nil: no rate limit
	keyFiles       []*KeyFile
	keyCheck       time.Duration
	readerID       string
	heartbeat      time.Duration
	reported       atomic.Value // string: keysState of the last record written

	observe, accessLog bool
	refusals           *logbudget.Budget // access-log lines of refused requests, per peer
	metrics            *metrics
	registry           *prometheus.Registry
	health             health

	cache cache
	warmN int
	warmQ chan warmItem // warm.go

	gcHeapFloor int64

	osListing atomic.Pointer[osListing]
}

// New returns a Server reading documents from docs.
func New(docs Documents, opts Options) *Server {
	s := &Server{
		docs: docs, log: opts.Logger, now: opts.Now,
		storeTimeout: opts.StoreTimeout, sweepInterval: opts.SweepInterval, maxConns: opts.MaxConnsPerAddr,
		trustedProxies: opts.TrustedProxies, proxySecrets: opts.ProxySecrets,
		policy: opts.TokenPolicy, instancePolicy: opts.InstanceTokenPolicy,
		observe: opts.Metrics, accessLog: opts.AccessLog,
		registry: opts.Registry, cache: newCache(),
		keyFiles: opts.KeyFiles, keyCheck: opts.KeyCheckInterval,
		readerID: opts.KeyReaderID, heartbeat: opts.KeyReaderHeartbeat,
		warmN: opts.WarmInstances, warmQ: make(chan warmItem, warmQueue),
		gcHeapFloor: opts.GCHeapFloor,
	}
	if s.warmN == 0 {
		s.warmN = DefaultWarmInstances
	}
	if s.readerID == "" {
		s.readerID = defaultReaderID()
	}
	if s.heartbeat <= 0 {
		s.heartbeat = DefaultKeyReaderHeartbeat
	}
	if s.keyCheck == 0 {
		s.keyCheck = DefaultKeyCheckInterval
	}
	if s.registry == nil {
		s.registry = NewRegistry()
	}
	s.metrics = s.newMetrics(s.registry, s.observe)
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now, s.realClock = time.Now, true
	}
	s.refusals = logbudget.New(0, 0, s.now)
	if s.storeTimeout <= 0 {
		s.storeTimeout = DefaultStoreTimeout
	}
	if s.sweepInterval == 0 {
		s.sweepInterval = DefaultSweepInterval
	}
	if s.maxConns == 0 {
		s.maxConns = DefaultMaxConnsPerAddr
	}
	if s.policy == "" {
		s.policy = TokenOptional
	}
	s.tokens = tokenMinter{keys: opts.TokenKeys, now: s.now, rand: opts.Rand}
	if s.tokens.rand == nil {
		s.tokens.rand = rand.Reader
	}
	if s.tokens.keys == nil {
		s.tokens.keys = NewKeyRing([]byte(rand.Text()))
	}
	if opts.RateLimit >= 0 {
		rate, burst := opts.RateLimit, opts.RateBurst
		if rate == 0 {
			rate = DefaultRateLimit
		}
		if burst <= 0 {
			burst = DefaultRateBurst
		}
		s.limiter = newRateLimiter(rate, burst, s.now)
	}
	return s
}

func (s *Server) policyFor(doc store.Document) TokenPolicy {
	if s.instancePolicy != nil {
		if p := s.instancePolicy(doc); p != "" {
			return p
		}
	}
	return s.policy
}

// HTTPServer returns an http.Server for the guest-facing listener, with
// the server's timeouts and header limit; serve it on Listener(ln).
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ConnContext:       s.connContextFor,
	}
}

// Listener wraps the guest-facing listener with the per-address
// connection limit (trusted proxies exempt; a negative limit counts
// nothing, but guests' connections still get their connContext).
func (s *Server) Listener(ln net.Listener) net.Listener {
	return LimitListener(ln, s.maxConns, s.trusted, func() { s.metrics.connsRejected.Inc() })
}

// result is what serving a request came to, for metrics and the access
// log.
type result struct {
	status int
	class  pathClass
	// classed: class is the entry's; else ServeHTTP works it out from the
	// path (classOf) when it needs it (metrics, access log), which the
	// requests served (found entries) never need.
	classed bool
	via     string // how the caller was identified: address, forwarded, proxy
	view    *view  // the instance served, if any (its uuid is read only for the access log)
}

// instance is the UUID of the instance served, or "".
func (r *result) instance() string {
	if r.view == nil {
		return ""
	}
	return r.view.uuid
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.observe && !s.accessLog {
		s.serve(w, r, time.Time{})
		return
	}
	var start time.Time
	if s.realClock {
		start = monoNow()
	} else {
		start = time.Now()
	}
	res := s.serve(w, r, start)
	d := time.Since(start)
	if !res.classed {
		res.class = classOf(splitPath(r.URL.Path))
	}
	if s.observe {
		s.metrics.observe(res.class, res.status, d)
	}
	if s.accessLog {
		s.logAccess(r, res, d)
	}
}

// monoEpoch is the origin of monoNow's readings.
var monoEpoch = time.Now()

// monoNow is time.Now from one read of the monotonic clock (time.Now reads
// the wall clock too: two clock reads, a share of a request's cost, issue
// 23 item 3). Its wall time is monoEpoch's advanced by the monotonic
// clock, which may drift from the wall clock: it is for measuring and
// rate limiting (differences of readings), not for dates or token expiry
// (those use Server.now).
func monoNow() time.Time { return monoEpoch.Add(time.Since(monoEpoch)) }

var ec2VersionListing = []byte(strings.Join(append(append([]string(nil), metadata.EC2Versions...), "latest"), "\n"))

// tokenPath is the token endpoint (PUT /latest/api/token), as an EC2 path.
const tokenPath = "latest/api/token"

// serve answers a request; start is when it arrived, if ServeHTTP took
// the time (zero otherwise).
func (s *Server) serve(w http.ResponseWriter, r *http.Request, start time.Time) result {
	isOS, rest := splitPath(r.URL.Path)
	var res result
	isToken := !isOS && rest == tokenPath
	switch {
	case isToken:
		if r.Method != http.MethodPut {
			w.Header().Set("Allow", http.MethodPut)
			return fail(w, res, http.StatusMethodNotAllowed, "405 Method Not Allowed")
		}
		if _, ok := r.Header[hdrForwardedFor]; ok {
			// A token must be asked for by the guest itself, not
			// through a proxy (AWS refuses these too).
			return fail(w, res, http.StatusForbidden, "403 Forbidden: token requests must not be forwarded")
		}
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
	case isOS && strings.HasSuffix(rest, "/password"):
		// Nova's password endpoint takes POST; which methods it accepts
		// is decided once the path is known to exist.
	default:
		w.Header().Set("Allow", "GET, HEAD")
		return fail(w, res, http.StatusMethodNotAllowed, "405 Method Not Allowed")
	}
	if !isOS && rest == "" {
		// GET / lists the EC2 versions without looking up the caller.
		return write(w, r, res, ec2VersionListing, ctText)
	}
	var ttl int
	if isToken {
		var ok bool
		if ttl, ok = parseTTL(r.Header[hdrTokenTTL]); !ok {
			return fail(w, res, http.StatusBadRequest, "400 Bad Request: X-aws-ec2-metadata-token-ttl-seconds must be 1 to "+strconv.Itoa(MaxTokenTTL))
		}
	}

	var (
		c    caller
		ierr *identifyError
	)
	cc := connOf(r)
	if cc != nil {
		// A guest's own connection: its peer is the guest (what
		// identify would find, without parsing RemoteAddr).
		c.peer, c.addr = cc.peer, cc.peer
	} else {
		c, ierr = s.identify(r.Header, r.RemoteAddr)
	}
	if ierr != nil {
		return s.refuseCaller(w, r, c, ierr, res)
	}
	now := start
	if !s.realClock {
		now = s.now()
	} else if now.IsZero() {
		now = monoNow()
	}
	var (
		v    *view
		memo *connMemo // the connection's, when it remembers v
	)
	if cc != nil && cc.memo.v != nil && cc.memo.gen == s.cache.gen.Load() {
		v, memo = cc.memo.v, &cc.memo
		res.via = "address"
		s.metrics.cacheHits.Inc()
	} else {
		var gen uint64
		if cc != nil {
			gen = s.cache.gen.Load() // before the lookup: a change during it moves gen past
		}
		var ok bool
		if v, res, ok = s.lookup(w, r, c, res, now); !ok {
			return res
		}
		if cc != nil && v.policy != TokenRequired {
			cc.memo = connMemo{gen: gen, v: v}
			memo = &cc.memo
		}
	}
	res.view = v
	if s.limiter != nil {
		if ok, wait := s.limiter.take(memo.viewBucket(s.limiter, v, now), now); !ok {
			return rateLimited(w, res, wait)
		}
	}
	if isToken {
		return s.serveToken(w, r, v, c.addr, ttl, res)
	}
	if toks, sent := r.Header[hdrToken]; sent {
		if len(toks) != 1 || !s.tokens.valid(toks[0], v.uuid, c.addr) {
			return fail(w, res, http.StatusUnauthorized, "401 Unauthorized")
		}
	} else if memo == nil && v.policy == TokenRequired { // a remembered view's policy is not TokenRequired
		return fail(w, res, http.StatusUnauthorized, "401 Unauthorized")
	}

	if isOS && rest == "" {
		return write(w, r, res, s.openstackListing(), ctText)
	}
	e, ok, err := v.find(isOS, rest, memo)
	if err != nil {
		return s.lookupFailed(w, r, res, &corruptError{uuid: v.uuid, err: err})
	}
	if !ok {
		return fail(w, res, http.StatusNotFound, "404 Not Found")
	}
	res.class, res.classed = e.class, true
	if e.password {
		return s.servePassword(w, r, v, res)
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		return fail(w, res, http.StatusMethodNotAllowed, "405 Method Not Allowed")
	}
	return write(w, r, res, e.body, e.header())
}

// The rare answers of serve are functions of their own: serve's stack
// frame is part of every guest connection's stack, which starts small and
// is copied each time it grows (issue 23 item 3).

// refuseCaller answers a request whose caller could not be identified.
func (s *Server) refuseCaller(w http.ResponseWriter, r *http.Request, c caller, ierr *identifyError, res result) result {
	if ierr == errBadSignature {
		// Within the proxy's refusal budget: a proxy relaying a
		// flood of forged ids writes a burst of these, not one each.
		if ok, suppressed := s.refusals.Allow("signature/" + c.peer.String()); ok {
			id := clip.String(r.Header.Get(hdrInstanceID), clip.Value)
			s.log.Warn("metadata proxy request with an invalid signature (do the shared secrets match?)", "peer", c.peer, "instance_id", id, "suppressed", suppressed)
		}
		s.metrics.identFailures[identProxySignature].Inc()
	} else {
		s.metrics.identFailures[identProxyHeaders].Inc()
	}
	return fail(w, res, ierr.status, ierr.msg)
}

// rateLimited answers a request over its instance's rate limit.
func rateLimited(w http.ResponseWriter, res result, wait time.Duration) result {
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter(wait)))
	return fail(w, res, http.StatusTooManyRequests, "429 Too Many Requests")
}

// serveToken answers PUT /latest/api/token with a token for the instance
// of v and the caller's address, valid for ttl seconds.
func (s *Server) serveToken(w http.ResponseWriter, r *http.Request, v *view, addr netip.Addr, ttl int, res result) result {
	tok, err := s.tokens.mint(v.uuid, addr, ttl)
	if err != nil {
		s.log.Error("metadata token", "err", err)
		return fail(w, res, http.StatusInternalServerError, "500 Internal Server Error")
	}
	w.Header()[hdrTokenTTL] = []string{strconv.Itoa(ttl)}
	return write(w, r, res, []byte(tok), ctText)
}

// lookup finds the caller's view. On failure it has answered the request.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, c caller, res result, now time.Time) (*view, result, bool) {
	var (
		v   *view
		err error
	)
	switch {
	case c.instanceID != "":
		res.via = "proxy"
		if v = s.cache.byUUID(c.instanceID); v != nil {
			s.metrics.cacheHits.Inc()
			break
		}
		s.metrics.cacheMisses.Inc()
		if !s.allowMiss("i/"+c.instanceID, now) {
			return nil, s.tooMany(w, res), false
		}
		v, err = s.fillUUID(r.Context(), c.instanceID)
	case c.addr.IsValid():
		res.via = "address"
		if c.addr != c.peer {
			res.via = "forwarded"
		}
		if v = s.cache.byAddr(c.addr); v != nil {
			s.metrics.cacheHits.Inc()
			break
		}
		s.metrics.cacheMisses.Inc()
		if !s.allowMiss("a/"+c.addr.String(), now) {
			return nil, s.tooMany(w, res), false
		}
		v, err = s.fillAddr(r.Context(), c.addr)
	default:
		err = store.ErrNotFound
	}
	if err == nil && c.instanceID != "" && v.projectID != c.tenantID {
		// Nova: a project mismatch is a 404, as if there were no such
		// instance.
		err = store.ErrNotFound
	}
	if err == nil {
		return v, res, true
	}
	return nil, s.lookupFailed(w, r, res, err), false
}

// lookupFailed answers a request whose caller could not be looked up.
func (s *Server) lookupFailed(w http.ResponseWriter, r *http.Request, res result, err error) result {
	var corrupt *corruptError
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.metrics.identFailures[identUnknownCaller].Inc()
		return fail(w, res, http.StatusNotFound, "404 Not Found: no metadata for this caller")
	case errors.As(err, &corrupt):
		s.log.Error("metadata document cannot be served", "instance", corrupt.uuid, "err", corrupt.err)
		return fail(w, res, http.StatusInternalServerError, "500 Internal Server Error")
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away while waiting for a fill.
		return fail(w, res, http.StatusServiceUnavailable, "503 Service Unavailable")
	default:
		return fail(w, res, http.StatusServiceUnavailable, "503 Service Unavailable: metadata store unreachable")
	}
}

// allowMiss rate-limits store reads by callers not yet identified.
func (s *Server) allowMiss(key string, now time.Time) bool {
	if s.limiter == nil {
		return true
	}
	ok, _ := s.limiter.allow(key, now)
	return ok
}

func (s *Server) tooMany(w http.ResponseWriter, res result) result {
	w.Header().Set("Retry-After", "1")
	return fail(w, res, http.StatusTooManyRequests, "429 Too Many Requests")
}

func write(w http.ResponseWriter, r *http.Request, res result, body []byte, ct []string) result {
	w.Header()["Content-Type"] = ct
	res.status = http.StatusOK
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
	return res
}

func fail(w http.ResponseWriter, res result, status int, msg string) result {
	http.Error(w, msg, status)
	res.status = status
	return res
}

// splitPath normalizes a request path (NormalizePath) and splits off its
// first segment: isOS for the OpenStack tree, else EC2; rest is the path
// below it ("" for the tree itself). In the common case it allocates
// nothing: rest is a substring of the path.
func splitPath(p string) (isOS bool, rest string) {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	p = cleanAbs(p)[1:]
	first, after, _ := strings.Cut(p, "/")
	switch first {
	case "openstack":
		return true, after
	case "ec2":
		return false, after
	}
	return false, p
}

// cleanAbs is path.Clean of an absolute path p. The paths guests ask for
// are clean but for a trailing slash (directories): those are returned
// without calling path.Clean (issue 23 item 3: Clean walks the path byte
// by byte, a share of each request's cost). A path with no "//" and no
// segment starting with "." has no empty, "." or ".." segment, so Clean
// would only drop its trailing slash.
func cleanAbs(p string) string {
	for i := 0; i < len(p)-1; i++ {
		if p[i] == '/' && (p[i+1] == '/' || p[i+1] == '.') {
			return path.Clean(p)
		}
	}
	if len(p) > 1 && p[len(p)-1] == '/' {
		return p[:len(p)-1]
	}
	return p
}

// NormalizePath applies Nova's path rules: posixpath.normpath (trailing
// slashes, "//", "." and ".." do not matter) and the EC2 prefix rule (a
// first segment other than "ec2" or "openstack" gets "ec2/" in front). It
// returns the path without its leading slash; "/" becomes "ec2".
func NormalizePath(p string) string {
	isOS, rest := splitPath(p)
	top := "ec2"
	if isOS {
		top = "openstack"
	}
	if rest == "" {
		return top
	}
	return top + "/" + rest
}

// classOf guesses a path's class before the path is looked up (the entry
// found, if any, has the exact class).
func classOf(isOS bool, rest string) pathClass {
	if rest == "" {
		return classListing
	}
	ver, sub, _ := strings.Cut(rest, "/")
	if isOS {
		switch sub {
		case "":
			return classListing
		case "meta_data.json":
			return classOpenStackMetaData
		case "password":
			return classPassword
		}
		return classOpenStackOther
	}
	switch {
	case rest == tokenPath:
		return classToken
	case !isEC2Version(ver):
		return classOther
	case sub == "":
		return classListing
	}
	return classEC2
}

func isEC2Version(v string) bool {
	_, ok := ec2Index[v] // the EC2 versions and "latest"
	return ok
}

type osListing struct {
	day  int // days since the Unix epoch, UTC
	body []byte
}

// openstackListing lists the OpenStack versions dated today or earlier,
// then "latest" (future versions stay requestable, only hidden).
func (s *Server) openstackListing() []byte {
	day := int(s.now().Unix() / 86400)
	if l := s.osListing.Load(); l != nil && l.day == day {
		return l.body
	}
	today := time.Unix(int64(day)*86400, 0).UTC().Format("2006-01-02")
	var b strings.Builder
	for _, v := range metadata.OpenStackVersions {
		if v <= today {
			b.WriteString(v)
			b.WriteByte('\n')
		}
	}
	b.WriteString("latest")
	l := &osListing{day: day, body: []byte(b.String())}
	s.osListing.Store(l)
	return l.body
}

// logAccess writes a request's access-log line. Of the request it holds
// only the method and the path, each cut by clip (never the query string:
// it may carry anything). Refused requests (status 400 and up) are logged
// within a budget per peer address: a peer sending thousands of them — an
// address with no instance, a guest over its rate limit — writes a burst
// of lines, then one a second, which says how many were suppressed.
func (s *Server) logAccess(r *http.Request, res result, d time.Duration) {
	var suppressed int
	if res.status >= 400 {
		peer := r.RemoteAddr
		if host, _, err := net.SplitHostPort(peer); err == nil {
			peer = host
		}
		var ok bool
		if ok, suppressed = s.refusals.Allow(peer); !ok {
			return
		}
	}
	attrs := []slog.Attr{
		slog.String("method", clip.String(r.Method, clip.Log)),
		slog.String("path", clip.String(r.URL.Path, clip.Log)),
		slog.String("class", res.class.String()),
		slog.Int("status", res.status),
		slog.Duration("duration", d),
		slog.String("peer", r.RemoteAddr),
		slog.String("via", res.via),
		slog.String("instance", res.instance()),
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "metadata request", attrs...)
}

// health is what the server knows about the store: the error of the last
// store operation (nil: reachable).
type health struct {
	err     atomic.Pointer[error]
	checked atomic.Int64 // time.Now().UnixNano() of the last result
	pingMu  sync.Mutex
}

// storeResult records the outcome of a store operation: not found and
// conflict are answers (the store is up); other errors mean it is not.
func (s *Server) storeResult(err error) {
	s.health.checked.Store(time.Now().UnixNano())
	if err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
		if prev := s.health.err.Swap(nil); prev != nil {
			s.log.Info("metadata store reachable again")
		}
		return
	}
	s.metrics.storeErrors.Inc()
	if prev := s.health.err.Swap(&err); prev == nil {
		s.log.Warn("metadata store unreachable; serving cached documents only", "err", err)
	} else {
		s.log.Debug("metadata store error", "err", err)
	}
}

// checkStore pings the store and records the result.
func (s *Server) checkStore(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.storeTimeout)
	defer cancel()
	err := s.docs.Ping(ctx)
	s.storeResult(err)
	return err
}

// serveHealth answers /healthz on the operator listener: 200
// {"status":"ok"} or 503 {"status":"degraded","store":"unreachable: …"}
// with the store error. The store is pinged when nothing was heard from
// it for a second (at most one ping at a time).
func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) result {
	res := result{class: classOther}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		return fail(w, res, http.StatusMethodNotAllowed, "405 Method Not Allowed")
	}
	if time.Since(time.Unix(0, s.health.checked.Load())) > time.Second {
		s.health.pingMu.Lock()
		if time.Since(time.Unix(0, s.health.checked.Load())) > time.Second {
			_ = s.checkStore(r.Context())
		}
		s.health.pingMu.Unlock()
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	errp := s.health.err.Load()
	if errp == nil {
		res.status = http.StatusOK
		w.WriteHeader(res.status)
		_, _ = io.WriteString(w, `{"status":"ok","store":"ok"}`+"\n")
		return res
	}
	msg := "unreachable: " + (*errp).Error()
	res.status = http.StatusServiceUnavailable
	w.WriteHeader(res.status)
	b, _ := json.Marshal(struct {
		Status string `json:"status"`
		Store  string `json:"store"`
	}{"degraded", msg})
	_, _ = w.Write(append(b, '\n'))
	return res
}
