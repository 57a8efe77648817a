package server

import (
	"bytes"
	"context"
	"fmt"
	"github.com/vmeta/vmeta/internal/testenv"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// fakeDocs is an in-memory store for the server: documents, the address
// index, passwords and a change feed the test drives (send, dropFeed).
type fakeDocs struct {
	mu        sync.Mutex
	addrs     map[string]string         // address -> uuid
	docs      map[string]store.Document // uuid -> document
	passwords map[string][]byte
	lookErr   error // returned by LookupAddress when set
	docErr    error // returned by Document when set
	// down, when set, makes every method fail with it (the store is
	// unreachable).
	down error
	// afterFetch, when set, runs after Document has read its result and
	// before it returns it (to hold a request in the middle of a fill).
	afterFetch func()
	subs       []chan store.Change

	lookups  atomic.Int64
	fetches  atomic.Int64
	versions atomic.Int64
	watches  atomic.Int64
	pings    atomic.Int64
}

// losslessDocs is fakeDocs whose feed says it loses nothing unsaid (as
// the embedded store's: server.LosslessWatcher).
type losslessDocs struct{ *fakeDocs }

func (losslessDocs) LosslessFeed() bool { return true }

func newFakeDocs() *fakeDocs {
	return &fakeDocs{addrs: map[string]string{}, docs: map[string]store.Document{}, passwords: map[string][]byte{}}
}

func (f *fakeDocs) LookupAddress(_ context.Context, addr string) (string, error) {
	f.lookups.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return "", f.down
	}
	if f.lookErr != nil {
		return "", f.lookErr
	}
	u, ok := f.addrs[addr]
	if !ok {
		return "", fmt.Errorf("address %s: %w", addr, store.ErrNotFound)
	}
	return u, nil
}

func (f *fakeDocs) Document(_ context.Context, uuid string) (store.Document, error) {
	f.fetches.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return store.Document{}, f.down
	}
	if f.docErr != nil {
		return store.Document{}, f.docErr
	}
	d, ok := f.docs[uuid]
	hook := f.afterFetch
	f.afterFetch = nil
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	f.mu.Lock()
	if !ok {
		return store.Document{}, fmt.Errorf("document %s: %w", uuid, store.ErrNotFound)
	}
	// Each read returns its own copy of the tree, as the real stores do
	// (what a view keeps of it then counts in BenchmarkViewMemory).
	d.Tree = bytes.Clone(d.Tree)
	return d, nil
}

func (f *fakeDocs) DocumentVersion(_ context.Context, uuid string) (int64, error) {
	f.versions.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return 0, f.down
	}
	d, ok := f.docs[uuid]
	if !ok {
		return 0, fmt.Errorf("document %s: %w", uuid, store.ErrNotFound)
	}
	return d.Version, nil
}

func (f *fakeDocs) Password(_ context.Context, uuid string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return nil, f.down
	}
	pw, ok := f.passwords[uuid]
	if !ok {
		return nil, fmt.Errorf("password of %s: %w", uuid, store.ErrNotFound)
	}
	return bytes.Clone(pw), nil
}

func (f *fakeDocs) SetPassword(_ context.Context, uuid string, pw []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return f.down
	}
	if _, ok := f.docs[uuid]; !ok {
		return fmt.Errorf("instance %s: %w", uuid, store.ErrNotFound)
	}
	if _, ok := f.passwords[uuid]; ok {
		return fmt.Errorf("password of %s: %w", uuid, store.ErrConflict)
	}
	f.passwords[uuid] = bytes.Clone(pw)
	return nil
}

func (f *fakeDocs) Ping(context.Context) error {
	f.pings.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.down
}

// Watch returns a feed the test drives with send; dropFeed closes every
// feed (a lost subscription).
func (f *fakeDocs) Watch(ctx context.Context) (<-chan store.Change, error) {
	f.watches.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return nil, f.down
	}
	ch := make(chan store.Change, 16)
	f.subs = append(f.subs, ch)
	go func() {
		<-ctx.Done()
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, c := range f.subs {
			if c == ch {
				f.subs = append(f.subs[:i], f.subs[i+1:]...)
				close(ch)
			}
		}
	}()
	return ch, nil
}

func (f *fakeDocs) send(c store.Change) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ch := range f.subs {
		ch <- c
	}
}

func (f *fakeDocs) dropFeed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ch := range f.subs {
		close(ch)
	}
	f.subs = nil
}

// pending returns how many sent changes no reader has taken yet.
func (f *fakeDocs) pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, ch := range f.subs {
		n += len(ch)
	}
	return n
}

func (f *fakeDocs) subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

func (f *fakeDocs) setDown(err error) {
	f.mu.Lock()
	f.down = err
	f.mu.Unlock()
}

// publish renders in and stores it under each of its addresses, bumping
// its version, without telling the feed.
func (f *fakeDocs) publish(t testing.TB, in *model.Instance) *metadata.Tree {
	t.Helper()
	tr, err := metadata.Render(in, metadata.Options{Rand: bytes.NewReader(make([]byte, 512))})
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	f.publishTree(t, in, tr)
	return tr
}

// publishTree stores a rendered tree for in, like publish.
func (f *fakeDocs) publishTree(t testing.TB, in *model.Instance, tr *metadata.Tree) {
	t.Helper()
	enc, err := tr.Encode()
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	prev := f.docs[in.UUID]
	for a, u := range f.addrs {
		if u == in.UUID {
			delete(f.addrs, a)
		}
	}
	f.docs[in.UUID] = store.Document{InstanceUUID: in.UUID, ProjectID: in.ProjectID, Addresses: in.Addresses, Version: prev.Version + 1, Tree: enc}
	for _, a := range in.Addresses {
		f.addrs[a] = in.UUID
	}
}

func (f *fakeDocs) version(uuid string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.docs[uuid].Version
}

// Test-wide secrets: none of them may ever appear in a log line (checked
// by TestMain over everything every test logged through testLogger).
const (
	testProxySecret = "pr0xy-shared-s3cret"
	testPriorSecret = "pr1or-shared-s3cret"
	testTokenKey    = "t0ken-signing-k3y"
	testPassword    = "p4ssw0rd-posted-by-guest"
)

var (
	testLogs   testenv.SyncBuffer
	tokensSeen sync.Map // every token a test minted
)

// quietLogger logs everything (debug included) into the test-wide buffer
// TestMain checks for secrets.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(&testLogs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func rememberToken(tok string) { tokensSeen.Store(tok, true) }

func TestMain(m *testing.M) {
	code := m.Run()
	logs := testLogs.String()
	secrets := []string{secretTag, testProxySecret, testPriorSecret, testTokenKey, testPassword, "#cloud-config"}
	tokensSeen.Range(func(k, _ any) bool {
		secrets = append(secrets, k.(string))
		return true
	})
	for _, sec := range secrets {
		if strings.Contains(logs, sec) {
			fmt.Fprintf(os.Stderr, "FAIL: a log line holds a secret (%.12s…)\n", sec)
			for line := range strings.Lines(logs) {
				if strings.Contains(line, sec) {
					fmt.Fprint(os.Stderr, "  ", line)
				}
			}
			code = 1
		}
	}
	if code == 0 && testing.Verbose() {
		fmt.Fprintf(os.Stderr, "checked %d bytes of log output for %d secrets\n", len(logs), len(secrets))
	}
	os.Exit(code)
}

// testOptions are the options most tests use: logging (access log too)
// into the checked buffer, metrics on, a fixed clock, no rate limit (tests
// of the limit turn it on), deterministic token nonces, and the test
// secrets.
func testOptions(now func() time.Time) Options {
	return Options{
		Logger:       quietLogger(),
		Now:          now,
		RateLimit:    -1,
		Metrics:      true,
		AccessLog:    true,
		ProxySecrets: NewKeyRing([]byte(testProxySecret), []byte(testPriorSecret)),
		TokenKeys:    NewKeyRing([]byte(testTokenKey)),
		Rand:         deterministicRand(1),
	}
}

// deterministicRand is a seeded reader (ChaCha8): reproducible "random"
// bytes.
func deterministicRand(seed byte) io.Reader {
	var s [32]byte
	s[0] = seed
	return rand.NewChaCha8(s)
}

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(day string) *clock { return &clock{t: at(day)()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
