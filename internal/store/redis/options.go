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
)

// Option adjusts Open.
type Option func(*options)

type options struct {
	lockLease        time.Duration
	healthInterval   time.Duration
	subscribeTimeout time.Duration
	hooks            *hooks
}

func defaultOptions() options {
	return options{
		lockLease:        DefaultLockLease,
		healthInterval:   DefaultHealthInterval,
		subscribeTimeout: DefaultSubscribeTimeout,
	}
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
