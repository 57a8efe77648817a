package redis

import "time"

// Defaults of the Options.
const (
	// DefaultLockLease is the TTL of an instance's write lock: how long a
	// writer that died keeps others from writing that instance, and the
	// stall after which a live writer loses the lock (its record write is
	// then refused).
	DefaultLockLease = 15 * time.Second
	// DefaultHealthInterval is how long a change-feed subscription may be
	// silent before Watch pings it; a ping unanswered for another interval
	// counts as a dead connection (a half-open TCP connection never
	// reports an error by itself).
	DefaultHealthInterval = 5 * time.Second
	// DefaultSubscribeTimeout bounds the wait for a subscription's
	// confirmation.
	DefaultSubscribeTimeout = 10 * time.Second
	// DefaultReplicaTimeout is how long a write waits for its replicas'
	// acknowledgement (see WithReplicas) when no timeout is given.
	DefaultReplicaTimeout = 2 * time.Second
	// DefaultSentinelReplicas is the number of replicas that must
	// acknowledge a write on a primary found through Sentinel, unless the
	// URL's min_replicas or WithReplicas says otherwise. One server and a
	// cluster default to 0 (no waiting).
	DefaultSentinelReplicas = 1
)

// Option adjusts Open.
type Option func(*options)

type options struct {
	lockLease        time.Duration
	healthInterval   time.Duration
	subscribeTimeout time.Duration
	hooks            *hooks
	password         string

	// replicas is the durability setting: minReplicas (-1: the URL
	// scheme's default) and its timeout (0: DefaultReplicaTimeout).
	replicas durability
}

// durability is how many replicas must acknowledge a write, and how long a
// write waits for them.
type durability struct {
	minReplicas int // <0: not set
	timeout     time.Duration
}

// over returns d with the fields that o sets replaced.
func (d durability) over(o durability) durability {
	if o.minReplicas >= 0 {
		d.minReplicas = o.minReplicas
	}
	if o.timeout > 0 {
		d.timeout = o.timeout
	}
	return d
}

func defaultOptions() options {
	return options{
		lockLease:        DefaultLockLease,
		healthInterval:   DefaultHealthInterval,
		subscribeTimeout: DefaultSubscribeTimeout,
		replicas:         durability{minReplicas: -1},
	}
}

// WithReplicas makes every write that the store reports as done first
// wait until n replicas have acknowledged it, for at most timeout (WAIT n
// timeout on the connection that wrote; see "Durability" in the package
// comment). A write that is not acknowledged in time fails with an error
// that wraps ErrNotDurable. n = 0 turns waiting off; a non-positive
// timeout means DefaultReplicaTimeout. The URL's min_replicas and
// replica_timeout options, when present, override this.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(o *options) {
		o.replicas = durability{minReplicas: max(n, 0), timeout: max(timeout, 0)}
	}
}

// WithPassword sets the password of the Redis servers that hold the data,
// replacing one in the URL: read from a file or the environment, it stays
// off the command line. "" keeps the URL's.
func WithPassword(pw string) Option {
	return func(o *options) { o.password = pw }
}

// WithLockLease sets the TTL of the instance write locks (see
// DefaultLockLease). Every client of one store should use the same lease.
// Non-positive values mean the default.
func WithLockLease(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.lockLease = d
		}
	}
}

// withWatchTimeouts sets the health interval and the subscription timeout
// of Watch (tests make a hang noticed quickly).
func withWatchTimeouts(health, subscribe time.Duration) Option {
	return func(o *options) {
		o.healthInterval, o.subscribeTimeout = health, subscribe
	}
}

// hooks run between the steps of Put (after the claims, after the record
// write) when set. An error stops Put right there as if the process had
// died: nothing is undone and the lock is left to expire. Only tests set
// them (withHooks); they may change the functions between calls of Put.
type hooks struct {
	afterClaim func() error
	afterWrite func() error
}

func withHooks(h *hooks) Option {
	return func(o *options) { o.hooks = h }
}

// hook returns the hook fn picks, nil when there is none.
func (o *options) hook(fn func(*hooks) func() error) func() error {
	if o.hooks == nil {
		return nil
	}
	return fn(o.hooks)
}
