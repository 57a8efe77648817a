// Package metadatakeys rotates the metadata service's own keys, which
// live in key files (server.ParseKeyFile): the session-token signing key
// (class keyrotation.Token: in place, the prior key kept for the longest
// token lifetime) and the metadata proxy shared secret (class
// keyrotation.Proxy: overlapping, keepPriorKeyCount prior secrets stay
// valid until the operator prunes them or the next rotation does).
//
// # Two phases: no reader ever rejects a valid token or signature
//
// Every metadata reader — the service inside hostctl serve and every
// vmeta-metadata replica — loads the key files into a server.KeyRing and
// re-reads them when the store's change feed announces a rotation
// (store.KeyNotifier), every --key-check-interval, and on SIGHUP. A
// replica that has not yet re-read the file would reject a token signed
// with a key it does not know, so a rotation to generation N is done in
// two phases, each a whole-file atomic write (0600) followed by an
// announcement on the feed:
//
//  1. next: the new key is added after the current one (accepted by every
//     reader that has loaded the file, used by none to sign);
//  2. once every live reader of the file has loaded it — each reader
//     keeps a record in the store of the key generations it has loaded
//     and of the key set id its file names (server.KeyReaders; a reader
//     that stopped rewriting it is gone; readers of another host's file
//     name another set and are not waited for) —
//     and at least Delay after phase 1 (twice the readers'
//     --key-check-interval: the bound for a reader that keeps no record):
//     current: the new key moves to the top (it signs; the proxies are
//     given it by `hostctl keys show proxy --reveal`), the old one becomes
//     prior, and prior keys past their retention are dropped. While a
//     reader lags, Rotate returns Result{Done: false} with Pending naming
//     the readers, and the Engine asks again on its next run.
//
// The file says which generation each key is and in which state
// (annotation comments that ReadKeyFile skips, and a key set id line,
// added by the first rotation when missing; a file created by
// server.ReadOrCreateKeyFile is generation 1, as the status the daemon
// records for it; one written by hand has no annotation: generation 0,
// so its first rotation always mints a key), so the procedure is
// idempotent for a generation: called again after a crash at any step it
// finds the next key of that generation and finishes (never minting a
// second one), and when the file is already at the generation it only
// makes sure every reader has it. Announcing is best effort (readers
// also check their files on a timer); reading the readers' records is
// not: with the store away (a Redis outage) phase 2 waits, Rotate fails,
// and the Engine's next run after the store is back finishes it.
//
// # Wiring (hostctl serve)
//
// The daemon builds its metadata options with server.Config.Options,
// which loads the key files and returns them (Options.KeyFile("token"),
// Options.KeyFile("proxy")); after creating the Engine, and before
// Engine.Recover:
//
//	tok, prox := metadatakeys.Register(keyEngine, mdOpts, st, log)
//
// registers the token key rotator (when there is a token key file) and
// the proxy secret rotator (when there is --metadata-proxy-secret-file),
// with the store (both backends implement store.KeyNotifier) to announce
// rotations and a Delay of twice --metadata-key-check-interval and a
// second (DelayFor). Both are keyrotation.Recoverers (Recover checks the
// file; for the token it also drops expired prior keys). The daemon's
// key rotation loop should also run `go tok.ExpireLoop(ctx, 0)`, so a
// prior token key goes once the longest token lifetime
// (server.MaxTokenTTL) has passed even when no rotation follows. prox implements
// keyrotation.Pruner (`hostctl keys prune proxy`) and prox.Current reads
// the secret `hostctl keys show proxy --reveal` prints (the same as
// server.ReadKeyFile(file)[0]). Rotate on the token class waits Delay
// between its phases, holding the Engine's lock for that long (with the
// default --metadata-key-check-interval of 10s: 21s).
//
// Replicas need no wiring: vmeta-metadata follows the feed, checks its
// files every --key-check-interval and reloads on SIGHUP by itself. They
// must read the same files (a shared or synchronised directory), with a
// --key-check-interval no longer than hostctl's.
package metadatakeys

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/atomicfile"
	"github.com/vmeta/vmeta/internal/crashpoint"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/server"
)

// The crash points of the procedures (internal/crashpoint).
const (
	ProcTokenRotate = "token-rotate"
	ProcProxyRotate = "proxy-rotate"
	ProcProxyPrune  = "proxy-prune"
	ProcTokenExpire = "token-expire"
)

// The steps of a rotation.
const (
	StepNextWritten      = "next-written"
	StepNextAnnounced    = "next-announced"
	StepCurrentWritten   = "current-written"
	StepCurrentAnnounced = "current-announced"
	StepWritten          = "written"
)

var (
	_ = crashpoint.Declare(ProcTokenRotate, StepNextWritten, StepNextAnnounced, StepCurrentWritten, StepCurrentAnnounced)
	_ = crashpoint.Declare(ProcProxyRotate, StepNextWritten, StepNextAnnounced, StepCurrentWritten, StepCurrentAnnounced)
	_ = crashpoint.Declare(ProcProxyPrune, StepWritten)
	_ = crashpoint.Declare(ProcTokenExpire, StepWritten)
)

// DefaultDelay is Options.Delay when zero: twice the readers' default
// key check interval, and a little.
const DefaultDelay = 2*server.DefaultKeyCheckInterval + time.Second

// TokenRetention is how long a token key stays accepted after it stops
// signing: the longest token lifetime, and a minute for clocks.
const TokenRetention = server.MaxTokenTTL*time.Second + time.Minute

// Options configure a rotator.
type Options struct {
	// File is the key file the in-process metadata service loaded
	// (server.Options.KeyFile): its path is rotated, and it is reloaded
	// after every write so that service has the new keys at once.
	File *server.KeyFile
	// Path is the key file, when there is no File (tests, tools).
	Path string
	// Notifier announces each write on the store's change feed (nil:
	// none; readers then rely on their periodic check).
	Notifier store.KeyNotifier
	// Readers holds the records in which every metadata reader says which
	// key generations it has loaded (server.KeyReaders): a next key
	// becomes current only once every live reader has it; until then
	// Rotate reports the rotation pending, naming the readers it waits
	// for (nil: no such check, Delay alone).
	Readers store.Records
	// Delay is how long a new key is accepted before it becomes current
	// (0: DefaultDelay): at least twice the longest --key-check-interval
	// of the readers.
	Delay time.Duration
	// Wait blocks until the time a next key may become current (nil: a
	// timer); tests put a condition in its place.
	Wait func(ctx context.Context, gen int64, until time.Time) error
	// Now is the clock (time.Now when nil); Rand the source of new keys
	// (crypto/rand when nil).
	Now  func() time.Time
	Rand io.Reader
	Log  *slog.Logger
}

// rotator is the procedure both classes share.
type rotator struct {
	class keyrotation.Class
	proc  string
	name  string // the key file's name in the readers' records
	o     Options
	path  string
	mu    sync.Mutex
}

func newRotator(class keyrotation.Class, proc string, o Options) *rotator {
	if o.Delay <= 0 {
		o.Delay = DefaultDelay
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Wait == nil {
		o.Wait = func(ctx context.Context, _ int64, until time.Time) error {
			d := until.Sub(o.Now())
			if d <= 0 {
				return nil
			}
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				return nil
			}
		}
	}
	p := o.Path
	if o.File != nil {
		p = o.File.Path()
	}
	name := "token"
	if class == keyrotation.Proxy {
		name = "proxy"
	}
	return &rotator{class: class, proc: proc, name: name, o: o, path: p}
}

func (r *rotator) hit(step string) { crashpoint.Hit(crashpoint.Name(r.proc, step)) }

// read returns the key file's entries and key set id.
func (r *rotator) read() ([]server.KeyEntry, string, error) {
	if r.path == "" {
		return nil, "", fmt.Errorf("%s: %w configured", r.class, ErrNoFile)
	}
	data, err := os.ReadFile(r.path)
	if err != nil {
		return nil, "", fmt.Errorf("%s key file: %w", r.class, err)
	}
	entries, err := server.ParseKeyFile(data)
	if err != nil {
		return nil, "", fmt.Errorf("%s key file %s: %w", r.class, r.path, err)
	}
	return entries, server.KeySetOf(data), nil
}

// write replaces the key file (whole, 0600, fsynced) with entries, naming
// the key set set.
func (r *rotator) write(set string, entries []server.KeyEntry) error {
	if err := atomicfile.WriteFile(r.path, server.FormatKeyFileSet(set, entries), 0o600); err != nil {
		return fmt.Errorf("write %s key file: %w", r.class, err)
	}
	return nil
}

// announce gives the in-process service the file's keys at once and
// tells every other reader through the store's change feed. A failure to
// announce is logged, not returned: readers check their files on a timer
// too.
func (r *rotator) announce(ctx context.Context, entries []server.KeyEntry) error {
	if r.o.File != nil {
		if _, err := r.o.File.Reload(); err != nil {
			return fmt.Errorf("load the new %s keys: %w", r.class, err)
		}
	}
	if r.o.Notifier == nil {
		return nil
	}
	var newest int64
	for _, e := range entries {
		newest = max(newest, e.Generation)
	}
	if err := r.o.Notifier.NotifyKey(ctx, store.KeyVersion{Class: string(r.class), Generation: newest}); err != nil {
		r.o.Log.Warn("key rotation: could not announce the new keys on the store's change feed; readers pick them up at their next key check",
			"class", string(r.class), "generation", newest, "err", err)
	}
	return nil
}

func (r *rotator) newKey() ([]byte, error) {
	raw := make([]byte, 32)
	if _, err := io.ReadFull(r.o.Rand, raw); err != nil {
		return nil, fmt.Errorf("new %s key: %w", r.class, err)
	}
	return []byte(hex.EncodeToString(raw)), nil
}

// lagging returns the live readers of key set set that have not loaded
// generation gen. (Readers of other sets read another file — another
// host's; readers of files naming no set are covered by Delay alone.)
func (r *rotator) lagging(ctx context.Context, set string, gen int64) ([]string, error) {
	if r.o.Readers == nil {
		return nil, nil
	}
	readers, err := server.KeyReaders(ctx, r.o.Readers, time.Now())
	if err != nil {
		return nil, err
	}
	var lag []string
	for _, rd := range readers {
		if f, ok := rd.Keys[r.name]; ok && f.Set == set && f.Newest < gen {
			lag = append(lag, rd.ID)
		}
	}
	return lag, nil
}

// rotate brings the file to generation gen (see the package comment);
// retain chooses the prior keys to keep once the new key is current
// (given most recent first). While a live reader has not loaded the next
// key, it returns what it waits for in pending (and the entries nil).
func (r *rotator) rotate(ctx context.Context, gen int64, retain func(priors []server.KeyEntry, now time.Time) []server.KeyEntry) (_ []server.KeyEntry, pending string, _ error) {
	if gen < 1 {
		return nil, "", fmt.Errorf("%s: rotate to generation %d: must be at least 1", r.class, gen)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	entries, set, err := r.read()
	if err != nil {
		return nil, "", err
	}
	if set == "" {
		set = server.NewKeySetID() // written with phase 1
	}
	if entries[0].Generation >= gen {
		// Done before (maybe a crash before the announcement): make sure
		// every reader has it.
		return entries, "", r.announce(ctx, entries)
	}
	i := slices.IndexFunc(entries, func(e server.KeyEntry) bool { return e.State == server.KeyNext && e.Generation == gen })
	if i < 0 {
		key, err := r.newKey()
		if err != nil {
			return nil, "", err
		}
		// Phase 1. Next keys of other generations (a rotation abandoned
		// for a higher one) never signed and were never revealed: drop.
		next := server.KeyEntry{Key: key, Generation: gen, State: server.KeyNext, Since: r.o.Now().UTC()}
		out := []server.KeyEntry{entries[0], next}
		for _, e := range entries[1:] {
			if e.State == server.KeyPrior {
				out = append(out, e)
			}
		}
		if err := r.write(set, out); err != nil {
			return nil, "", err
		}
		r.hit(StepNextWritten)
		r.o.Log.Info("key rotation: new key distributed (accepted, not yet current)", "class", string(r.class), "generation", gen, "current_after", next.Since.Add(r.o.Delay))
		entries, i = out, 1
		if err := r.announce(ctx, entries); err != nil {
			return nil, "", err
		}
		r.hit(StepNextAnnounced)
	} else if err := r.announce(ctx, entries); err != nil {
		// Resumed after a crash: the announcement may not have gone out.
		return nil, "", err
	}
	next := entries[i]
	if err := r.o.Wait(ctx, gen, next.Since.Add(r.o.Delay)); err != nil {
		return nil, "", fmt.Errorf("%s: waiting for every reader to load generation %d: %w", r.class, gen, err)
	}
	lag, err := r.lagging(ctx, set, gen)
	if err != nil {
		return nil, "", fmt.Errorf("%s: which readers have generation %d: %w", r.class, gen, err)
	}
	if len(lag) > 0 {
		r.o.Log.Info("key rotation: waiting for metadata readers to load the new key", "class", string(r.class), "generation", gen, "readers", strings.Join(lag, ","))
		return nil, fmt.Sprintf("generation %d distributed; waiting for %d metadata reader(s) to load it: %s", gen, len(lag), strings.Join(lag, ", ")), nil
	}
	// Phase 2.
	now := r.o.Now().UTC()
	cur := entries[0]
	cur.State, cur.Since = server.KeyPrior, now
	next.State, next.Since = server.KeyCurrent, now
	priors := []server.KeyEntry{cur}
	for j, e := range entries[1:] {
		if j+1 != i && e.State == server.KeyPrior {
			if e.Since.IsZero() {
				e.Since = now // a hand-written prior key: its clock starts now
			}
			priors = append(priors, e)
		}
	}
	out := append([]server.KeyEntry{next}, retain(priors, now)...)
	if err := r.write(set, out); err != nil {
		return nil, "", err
	}
	r.hit(StepCurrentWritten)
	r.o.Log.Info("key rotation: new key is current", "class", string(r.class), "generation", gen, "prior_keys", len(out)-1)
	if err := r.announce(ctx, out); err != nil {
		return nil, "", err
	}
	r.hit(StepCurrentAnnounced)
	return out, "", nil
}

// dropPriors rewrites the file keeping the prior keys retain chooses;
// the current key and a next key stay. It reports the entries after.
func (r *rotator) dropPriors(ctx context.Context, proc string, retain func(priors []server.KeyEntry, now time.Time) []server.KeyEntry) ([]server.KeyEntry, int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	entries, set, err := r.read()
	if err != nil {
		return nil, 0, err
	}
	now := r.o.Now().UTC()
	var priors, others []server.KeyEntry
	for _, e := range entries[1:] {
		if e.State == server.KeyPrior {
			priors = append(priors, e)
		} else {
			others = append(others, e)
		}
	}
	kept := retain(priors, now)
	if len(kept) == len(priors) {
		return entries, 0, nil
	}
	out := append(append([]server.KeyEntry{entries[0]}, others...), kept...)
	if err := r.write(set, out); err != nil {
		return nil, 0, err
	}
	crashpoint.Hit(crashpoint.Name(proc, StepWritten))
	r.o.Log.Info("key rotation: prior keys dropped", "class", string(r.class), "dropped", len(priors)-len(kept), "prior_keys", len(kept))
	return out, len(priors) - len(kept), r.announce(ctx, out)
}

// State is what a key file holds, without the keys.
type State struct {
	// Generation of the current key (0: unknown, a file written by hand
	// or before rotation was tracked).
	Generation int64
	// Next is the generation of a key being distributed (0: none).
	Next int64
	// PriorKeyCount is how many prior keys are still accepted.
	PriorKeyCount int
}

func stateOf(entries []server.KeyEntry) State {
	s := State{Generation: entries[0].Generation}
	for _, e := range entries[1:] {
		switch e.State {
		case server.KeyNext:
			s.Next = e.Generation
		case server.KeyPrior:
			s.PriorKeyCount++
		}
	}
	return s
}

// State reads the key file's state.
func (r *rotator) State() (State, error) {
	entries, _, err := r.read()
	if err != nil {
		return State{}, err
	}
	return stateOf(entries), nil
}

// Token rotates the session-token signing key (keyrotation.Token).
type Token struct{ r *rotator }

// NewToken returns the token key's rotator.
func NewToken(o Options) *Token {
	return &Token{r: newRotator(keyrotation.Token, ProcTokenRotate, o)}
}

var (
	_ keyrotation.Generationer = (*Token)(nil)
	_ keyrotation.Generationer = (*Proxy)(nil)
	_ keyrotation.Rotator      = (*Token)(nil)
	_ keyrotation.Recoverer    = (*Token)(nil)
	_ keyrotation.Rotator      = (*Proxy)(nil)
	_ keyrotation.Pruner       = (*Proxy)(nil)
	_ keyrotation.Recoverer    = (*Proxy)(nil)
)

// retainTokens keeps the prior token keys that stopped signing less than
// TokenRetention ago: a token signed just before lives that long.
func retainTokens(priors []server.KeyEntry, now time.Time) []server.KeyEntry {
	var out []server.KeyEntry
	for _, e := range priors {
		if e.Since.IsZero() || now.Sub(e.Since) < TokenRetention {
			out = append(out, e)
		}
	}
	return out
}

// Rotate implements keyrotation.Rotator: it makes a new token key of
// generation gen current, in two phases (it waits Options.Delay between
// them), keeping the prior keys for TokenRetention. keep is ignored (an
// in-place class).
func (t *Token) Rotate(ctx context.Context, s keyrotation.Subject, gen int64, _ int, _ func(keyrotation.Progress)) (keyrotation.Result, error) {
	_, pending, err := t.r.rotate(ctx, gen, retainTokens)
	if err != nil || pending != "" {
		return keyrotation.Result{Pending: pending}, err
	}
	return keyrotation.Result{Done: true}, nil
}

// Expire drops the prior token keys whose tokens have all expired; it
// reports how many it dropped.
func (t *Token) Expire(ctx context.Context) (int, error) {
	_, n, err := t.r.dropPriors(ctx, ProcTokenExpire, retainTokens)
	return n, err
}

// DefaultExpireEvery is how often ExpireLoop looks for expired token
// keys.
const DefaultExpireEvery = 10 * time.Minute

// ExpireLoop calls Expire every every (0: DefaultExpireEvery) until ctx
// is done, logging failures: run it in a goroutine of the daemon.
func (t *Token) ExpireLoop(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = DefaultExpireEvery
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if _, err := t.Expire(ctx); err != nil && ctx.Err() == nil {
				t.r.o.Log.Warn("token keys: dropping expired prior keys failed", "err", err)
			}
		}
	}
}

// Recover implements keyrotation.Recoverer: it checks the key file and
// drops expired prior keys. (A rotation interrupted between its phases
// is finished by the Engine, which calls Rotate again for the same
// generation.)
func (t *Token) Recover(ctx context.Context) error {
	_, err := t.Expire(ctx)
	return err
}

// Generation implements keyrotation.Generationer: the generation of the
// file's current key (0 for a file no rotation wrote), where the Engine
// starts the status it first records.
func (t *Token) Generation(context.Context, keyrotation.Subject) (int64, error) {
	st, err := t.r.State()
	return st.Generation, err
}

// State reads the token key file's state.
func (t *Token) State() (State, error) { return t.r.State() }

// Proxy rotates the metadata proxy shared secret (keyrotation.Proxy).
type Proxy struct{ r *rotator }

// NewProxy returns the proxy secret's rotator.
func NewProxy(o Options) *Proxy {
	return &Proxy{r: newRotator(keyrotation.Proxy, ProcProxyRotate, o)}
}

func retainCount(keep int) func([]server.KeyEntry, time.Time) []server.KeyEntry {
	return func(priors []server.KeyEntry, _ time.Time) []server.KeyEntry {
		return priors[:min(max(keep, 0), len(priors))]
	}
}

// Rotate implements keyrotation.Rotator: it makes a new proxy secret of
// generation gen current, in two phases (it waits Options.Delay between
// them), keeping the keep most recent prior secrets valid (the proxies
// still signing with them keep working until the operator has given
// them the new one: `hostctl keys show proxy --reveal`).
func (p *Proxy) Rotate(ctx context.Context, s keyrotation.Subject, gen int64, keep int, _ func(keyrotation.Progress)) (keyrotation.Result, error) {
	if keep < 0 || keep > keyrotation.MaxKeepPriorKeyCount {
		return keyrotation.Result{}, fmt.Errorf("%w: %s: keepPriorKeyCount %d: must be 0 to %d", keyrotation.ErrInvalid, keyrotation.Proxy, keep, keyrotation.MaxKeepPriorKeyCount)
	}
	entries, pending, err := p.r.rotate(ctx, gen, retainCount(keep))
	if err != nil || pending != "" {
		return keyrotation.Result{Pending: pending}, err
	}
	n := stateOf(entries).PriorKeyCount
	if n > keep {
		// At the generation already (a crash after phase 2, or a file
		// rotated by hand): the rotation prunes too.
		if entries, _, err = p.r.dropPriors(ctx, ProcProxyPrune, retainCount(keep)); err != nil {
			return keyrotation.Result{}, err
		}
		n = stateOf(entries).PriorKeyCount
	}
	return keyrotation.Result{Done: true, PriorKeyCount: &n}, nil
}

// Prune implements keyrotation.Pruner: it drops the prior secrets beyond
// the keep most recent (the operator says the proxies have the current
// one) and returns how many stay.
func (p *Proxy) Prune(ctx context.Context, keep int) (int, error) {
	if keep < 0 || keep > keyrotation.MaxKeepPriorKeyCount {
		return 0, fmt.Errorf("%w: %s: keep %d: must be 0 to %d", keyrotation.ErrInvalid, keyrotation.Proxy, keep, keyrotation.MaxKeepPriorKeyCount)
	}
	entries, _, err := p.r.dropPriors(ctx, ProcProxyPrune, retainCount(keep))
	if err != nil {
		return 0, err
	}
	return stateOf(entries).PriorKeyCount, nil
}

// Recover implements keyrotation.Recoverer: it checks that the secret
// file is readable and well-formed.
func (p *Proxy) Recover(context.Context) error {
	_, _, err := p.r.read()
	return err
}

// Current returns the current proxy secret, for the proxies'
// configuration (`hostctl keys show proxy --reveal`, admin only). The
// caller must not log it.
func (p *Proxy) Current(context.Context) ([]byte, error) {
	entries, _, err := p.r.read()
	if err != nil {
		return nil, err
	}
	return entries[0].Key, nil
}

// Generation implements keyrotation.Generationer (see Token.Generation).
func (p *Proxy) Generation(context.Context, keyrotation.Subject) (int64, error) {
	st, err := p.r.State()
	return st.Generation, err
}

// State reads the proxy secret file's state (PriorKeyCount is the
// status's priorKeyCount).
func (p *Proxy) State() (State, error) { return p.r.State() }

// ErrNoFile: a rotator without a key file.
var ErrNoFile = errors.New("no key file")

// Store is what Register needs of the store: the change feed to announce
// on and the readers' records (store.Store has both; nil: neither).
type Store interface {
	store.KeyNotifier
	store.Records
}

// Registrar is what Register needs of the keyrotation Engine.
type Registrar interface {
	Register(c keyrotation.Class, r keyrotation.Rotator)
}

// DelayFor returns the Delay that suits readers checking their key files
// every check (server.Options.KeyCheckInterval; 0 or negative: the
// default): twice that, and a second.
func DelayFor(check time.Duration) time.Duration {
	if check <= 0 {
		return DefaultDelay
	}
	return 2*check + time.Second
}

// Register registers the token key rotator on e, and the proxy secret
// rotator when the metadata service has a proxy secret file, for the
// metadata service options hostctl serve built (server.Config.Options:
// its key files are reloaded after every write); n announces the
// rotations and to learn which readers have loaded a new key (the
// store). It returns the rotators (the Token for Expire,
// the Proxy for Current; either nil when its file is not configured).
func Register(e Registrar, md server.Options, st Store, log *slog.Logger) (*Token, *Proxy) {
	var (
		tok  *Token
		prox *Proxy
	)
	delay := DelayFor(md.KeyCheckInterval)
	o := func(f *server.KeyFile) Options {
		opts := Options{File: f, Delay: delay, Log: log}
		if st != nil {
			opts.Notifier, opts.Readers = st, st
		}
		return opts
	}
	if f := md.KeyFile("token"); f != nil {
		tok = NewToken(o(f))
		e.Register(keyrotation.Token, tok)
	}
	if f := md.KeyFile("proxy"); f != nil {
		prox = NewProxy(o(f))
		e.Register(keyrotation.Proxy, prox)
	}
	return tok, prox
}
