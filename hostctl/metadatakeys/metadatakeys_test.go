package metadatakeys

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv/stores"
	"github.com/vmeta/vmeta/server"
)

// notifier records announcements; fail makes them fail.
type notifier struct {
	mu   sync.Mutex
	got  []store.KeyVersion
	fail bool
}

func (n *notifier) NotifyKey(_ context.Context, k store.KeyVersion) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fail {
		return errors.New("store unreachable")
	}
	n.got = append(n.got, k)
	return nil
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type fixture struct {
	path  string
	file  *server.KeyFile
	note  *notifier
	clock *clock
	log   *bytes.Buffer
	// inWait is called by Wait (phase 1 done, phase 2 not begun).
	inWait func(gen int64, until time.Time)
	waits  int
}

func newFixture(t *testing.T, content string) *fixture {
	t.Helper()
	f := &fixture{path: filepath.Join(t.TempDir(), "keys"), note: &notifier{},
		clock: &clock{now: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}, log: &bytes.Buffer{}}
	if content != "" {
		if err := os.WriteFile(f.path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		f.file = server.NewKeyFile("test", f.path, &server.KeyRing{}, slog.New(slog.NewTextHandler(f.log, nil)))
		if _, err := f.file.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fixture) opts() Options {
	return Options{File: f.file, Path: f.path, Notifier: f.note, Delay: time.Minute, Now: f.clock.Now,
		Log: slog.New(slog.NewTextHandler(f.log, nil)),
		Wait: func(_ context.Context, gen int64, until time.Time) error {
			f.waits++
			if f.inWait != nil {
				f.inWait(gen, until)
			}
			f.clock.Add(until.Sub(f.clock.Now()))
			return nil
		}}
}

func (f *fixture) entries(t *testing.T) []server.KeyEntry {
	t.Helper()
	data, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	e, err := server.ParseKeyFile(data)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func shape(es []server.KeyEntry) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(string(e.State[0]))
		b.WriteString(strconv.FormatInt(e.Generation, 10))
	}
	return b.String()
}

const genOne = "# vmeta-key generation=1 state=current since=2026-11-24T11:00:00Z\nkey-one\n"

func TestTokenRotateTwoPhases(t *testing.T) {
	f := newFixture(t, genOne)
	f.inWait = func(gen int64, until time.Time) {
		// Phase 1: the new key is accepted everywhere, not signing.
		es := f.entries(t)
		if got := shape(es); got != "c1 n2" {
			t.Errorf("file during the wait: %s, want c1 n2", got)
		}
		ring := f.file.Ring()
		if string(ring.Current()) != "key-one" || len(ring.All()) != 2 {
			t.Errorf("in-process ring during the wait: current is not the old key or %d keys", len(ring.All()))
		}
		if want := es[1].Since.Add(time.Minute); !until.Equal(want) {
			t.Errorf("wait until %s, want %s", until, want)
		}
	}
	tok := NewToken(f.opts())
	res, err := tok.Rotate(t.Context(), keyrotation.Subject{Class: keyrotation.Token}, 2, 0, nil)
	if err != nil || !res.Done {
		t.Fatalf("Rotate: %+v %v", res, err)
	}
	es := f.entries(t)
	if got := shape(es); got != "c2 p1" {
		t.Fatalf("file after: %s, want c2 p1", got)
	}
	if string(f.file.Ring().Current()) != string(es[0].Key) || string(es[1].Key) != "key-one" {
		t.Error("in-process ring is not the file's keys")
	}
	if len(es[0].Key) != 64 {
		t.Errorf("new key is %d characters, want 64 (32 bytes, hex)", len(es[0].Key))
	}
	if fi, _ := os.Stat(f.path); fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v", fi.Mode().Perm())
	}
	if len(f.note.got) != 2 || f.note.got[0] != (store.KeyVersion{Class: string(keyrotation.Token), Generation: 2}) {
		t.Errorf("announcements %+v", f.note.got)
	}
	if strings.Contains(f.log.String(), string(es[0].Key)) || strings.Contains(f.log.String(), "key-one") {
		t.Errorf("a key was logged:\n%s", f.log)
	}

	// Again for the same generation: nothing new, only announced.
	before, _ := os.ReadFile(f.path)
	waits := f.waits
	if res, err := tok.Rotate(t.Context(), keyrotation.Subject{Class: keyrotation.Token}, 2, 0, nil); err != nil || !res.Done {
		t.Fatalf("Rotate again: %+v %v", res, err)
	}
	after, _ := os.ReadFile(f.path)
	if !bytes.Equal(before, after) || f.waits != waits {
		t.Error("a second Rotate to the same generation changed the file or waited")
	}
	if len(f.note.got) != 3 {
		t.Errorf("announcements %d, want 3", len(f.note.got))
	}
}

// TestRotateResumes: a rotation interrupted after phase 1 (crash, or the
// context ended in the wait) finishes with the key it distributed.
func TestRotateResumes(t *testing.T) {
	f := newFixture(t, genOne)
	o := f.opts()
	ctx, cancel := context.WithCancel(t.Context())
	o.Wait = func(ctx context.Context, _ int64, _ time.Time) error { cancel(); return ctx.Err() }
	if _, err := NewToken(o).Rotate(ctx, keyrotation.Subject{}, 2, 0, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Rotate with the context ended in the wait: %v", err)
	}
	es := f.entries(t)
	if shape(es) != "c1 n2" {
		t.Fatalf("file: %s", shape(es))
	}
	next := string(es[1].Key)
	if _, err := NewToken(f.opts()).Rotate(t.Context(), keyrotation.Subject{}, 2, 0, nil); err != nil {
		t.Fatal(err)
	}
	es = f.entries(t)
	if shape(es) != "c2 p1" || string(es[0].Key) != next {
		t.Fatalf("file %s; the distributed key became current: %v", shape(es), string(es[0].Key) == next)
	}
}

func TestTokenRetention(t *testing.T) {
	f := newFixture(t, genOne)
	tok := NewToken(f.opts())
	for gen := int64(2); gen <= 3; gen++ {
		if _, err := tok.Rotate(t.Context(), keyrotation.Subject{}, gen, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := shape(f.entries(t)); got != "c3 p2 p1" {
		t.Fatalf("after two rotations within the token lifetime: %s", got)
	}
	// Nothing expired yet.
	if n, err := tok.Expire(t.Context()); n != 0 || err != nil {
		t.Fatalf("Expire: %d %v", n, err)
	}
	// Generation 1 stopped signing a minute before generation 2 did (each
	// rotation waited the one-minute Delay).
	f.clock.Add(TokenRetention - time.Minute - time.Second)
	if n, err := tok.Expire(t.Context()); n != 0 || err != nil {
		t.Fatalf("Expire a second before gen 1's tokens expired: %d %v", n, err)
	}
	f.clock.Add(time.Second)
	if n, err := tok.Expire(t.Context()); n != 1 || err != nil {
		t.Fatalf("Expire after gen 1's tokens expired: %d %v (file %s)", n, err, shape(f.entries(t)))
	}
	if got := shape(f.entries(t)); got != "c3 p2" {
		t.Fatalf("after Expire: %s", got)
	}
	f.clock.Add(time.Minute)
	if err := tok.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := shape(f.entries(t)); got != "c3" {
		t.Fatalf("after Recover: %s", got)
	}
	if st, err := tok.State(); err != nil || st != (State{Generation: 3}) {
		t.Fatalf("State %+v %v", st, err)
	}
}

func TestProxyKeepAndPrune(t *testing.T) {
	f := newFixture(t, "hand-written-secret\n")
	p := NewProxy(f.opts())
	var revealed []string
	f.inWait = func(int64, time.Time) {
		cur, err := p.Current(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		revealed = append(revealed, string(cur))
	}
	steps := []struct {
		gen   int64
		keep  int
		shape string
	}{
		{1, 1, "c1 p0"},
		{2, 2, "c2 p1 p0"},
		{3, 2, "c3 p2 p1"},
		{4, 0, "c4"},
		{5, 1, "c5 p4"},
	}
	for _, s := range steps {
		res, err := p.Rotate(t.Context(), keyrotation.Subject{}, s.gen, s.keep, nil)
		if err != nil {
			t.Fatalf("Rotate %d: %v", s.gen, err)
		}
		if got := shape(f.entries(t)); got != s.shape {
			t.Fatalf("Rotate to %d keeping %d: %s, want %s", s.gen, s.keep, got, s.shape)
		}
		if res.PriorKeyCount == nil || *res.PriorKeyCount != strings.Count(s.shape, "p") {
			t.Fatalf("PriorKeyCount %v", res.PriorKeyCount)
		}
	}
	// While a new secret is distributed, the old one is what is revealed.
	if revealed[0] != "hand-written-secret" {
		t.Error("the new secret was revealed before it was current")
	}
	// The next rotation prunes too; Prune drops beyond keep.
	if _, err := p.Rotate(t.Context(), keyrotation.Subject{}, 6, 3, nil); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Prune(t.Context(), 1); n != 1 || err != nil {
		t.Fatalf("Prune(1): %d %v", n, err)
	}
	if got := shape(f.entries(t)); got != "c6 p5" {
		t.Fatalf("after Prune(1): %s", got)
	}
	if n, err := p.Prune(t.Context(), 0); n != 0 || err != nil {
		t.Fatalf("Prune(0): %d %v", n, err)
	}
	cur, _ := p.Current(t.Context())
	if all := f.file.Ring().All(); len(all) != 1 || !bytes.Equal(all[0], cur) {
		t.Error("in-process ring is not the pruned file's")
	}
	// Rotating to the generation it is at with a lower keep prunes.
	if _, err := p.Rotate(t.Context(), keyrotation.Subject{}, 7, 1, nil); err != nil {
		t.Fatal(err)
	}
	if res, err := p.Rotate(t.Context(), keyrotation.Subject{}, 7, 0, nil); err != nil || *res.PriorKeyCount != 0 {
		t.Fatalf("Rotate at the generation keeping 0: %+v %v", res, err)
	}
}

func TestBadInput(t *testing.T) {
	f := newFixture(t, genOne)
	p := NewProxy(f.opts())
	before, _ := os.ReadFile(f.path)
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"keep below 0", func() error { _, err := p.Rotate(t.Context(), keyrotation.Subject{}, 2, -1, nil); return err }, "keepPriorKeyCount -1: must be 0 to 10"},
		{"keep above 10", func() error { _, err := p.Prune(t.Context(), 11); return err }, "keep 11: must be 0 to 10"},
		{"generation 0", func() error { _, err := p.Rotate(t.Context(), keyrotation.Subject{}, 0, 1, nil); return err }, "generation 0: must be at least 1"},
	} {
		err := tc.call()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	after, _ := os.ReadFile(f.path)
	if !bytes.Equal(before, after) {
		t.Error("refused calls changed the file")
	}

	// A broken file: refused, named, unchanged, no key in the error.
	broken := "# vmeta-key generation=x state=current\nsecret-in-file\n"
	os.WriteFile(f.path, []byte(broken), 0o600)
	_, err := NewToken(f.opts()).Rotate(t.Context(), keyrotation.Subject{}, 2, 0, nil)
	if err == nil || !strings.Contains(err.Error(), f.path) || !strings.Contains(err.Error(), `generation "x"`) || strings.Contains(err.Error(), "secret-in-file") {
		t.Errorf("broken file: %v", err)
	}
	if b, _ := os.ReadFile(f.path); string(b) != broken {
		t.Error("a broken file was rewritten")
	}
	// No file.
	o := f.opts()
	o.File, o.Path = nil, filepath.Join(t.TempDir(), "absent")
	if _, err := NewProxy(o).Rotate(t.Context(), keyrotation.Subject{}, 2, 1, nil); err == nil || !strings.Contains(err.Error(), "proxy-secret key file") {
		t.Errorf("missing file: %v", err)
	}
	o.Path = ""
	if _, err := NewProxy(o).Current(t.Context()); !errors.Is(err, ErrNoFile) {
		t.Errorf("no file configured: %v", err)
	}
}

// TestAnnounceFailureDoesNotStop: with the store away, the rotation goes
// on (readers find the file on their timer) and says so in the log.
func TestAnnounceFailureDoesNotStop(t *testing.T) {
	f := newFixture(t, genOne)
	f.note.fail = true
	if _, err := NewToken(f.opts()).Rotate(t.Context(), keyrotation.Subject{}, 2, 0, nil); err != nil {
		t.Fatal(err)
	}
	if shape(f.entries(t)) != "c2 p1" {
		t.Fatal(shape(f.entries(t)))
	}
	if !strings.Contains(f.log.String(), "could not announce") {
		t.Errorf("log:\n%s", f.log)
	}
}

type registrar map[keyrotation.Class]keyrotation.Rotator

func (r registrar) Register(c keyrotation.Class, rot keyrotation.Rotator) { r[c] = rot }

// TestRegister: the rotators hostctl serve registers rotate the files its
// metadata service loaded, and that service has the new keys at once; a
// created token key file is at generation 1 (as its status), so the
// first rotation asks for 2.
func TestRegister(t *testing.T) {
	dir := t.TempDir()
	proxyFile := filepath.Join(dir, "proxy.secret")
	os.WriteFile(proxyFile, []byte("register-proxy-secret\n"), 0o600)
	cfg := server.Config{TokenKeyFile: filepath.Join(dir, "token.key"), ProxySecretFile: proxyFile, KeyCheckInterval: 2 * time.Second}
	md, err := cfg.Options(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	st := stores.BoltIn(t, dir)
	reg := registrar{}
	tok, prox := Register(reg, md, st, nil)
	if reg[keyrotation.Token] != tok || reg[keyrotation.Proxy] != prox || tok == nil || prox == nil {
		t.Fatalf("registered %v", reg)
	}
	if tok.r.o.Delay != 5*time.Second {
		t.Errorf("delay %s, want twice the key check interval and a second", tok.r.o.Delay)
	}
	tok.r.o.Wait = func(context.Context, int64, time.Time) error { return nil }
	prox.r.o.Wait = tok.r.o.Wait
	before := string(md.TokenKeys.Current())
	if _, err := tok.Rotate(t.Context(), keyrotation.Subject{}, 2, 0, nil); err != nil {
		t.Fatal(err)
	}
	if cur := string(md.TokenKeys.Current()); cur == before || len(md.TokenKeys.All()) != 2 {
		t.Error("the in-process metadata service did not get the new token key")
	}
	if _, err := prox.Rotate(t.Context(), keyrotation.Subject{}, 3, 1, nil); err != nil {
		t.Fatal(err)
	}
	cur, _ := prox.Current(t.Context())
	if !bytes.Equal(md.ProxySecrets.Current(), cur) || string(md.ProxySecrets.All()[1]) != "register-proxy-secret" {
		t.Error("the in-process metadata service did not get the new proxy secret")
	}
	keys, _ := server.ReadKeyFile(proxyFile)
	if !bytes.Equal(keys[0], cur) {
		t.Error("Current is not the file's first key (what ReadKeyFile readers use)")
	}

	// Without a proxy secret file only the token is registered.
	md.KeyFiles = []*server.KeyFile{md.KeyFile("token")}
	reg = registrar{}
	if _, p := Register(reg, md, nil, nil); p != nil || len(reg) != 1 {
		t.Errorf("registered %v without a proxy secret file", reg)
	}
}

// TestWaitsForReaders: a next key becomes current only once every live
// reader's record says it has loaded it; expired records and readers
// without that key file do not hold it back.
func TestWaitsForReaders(t *testing.T) {
	st := stores.Bolt(t)
	putReader := func(id string, expires time.Time, keys map[string]server.KeyReaderFile) {
		t.Helper()
		b, _ := json.Marshal(server.KeyReader{ID: id, Keys: keys, Updated: time.Now(), Expires: expires})
		if _, err := st.PutRecord(t.Context(), server.KeyReaderPrefix+id, b, -1); err != nil {
			t.Fatal(err)
		}
	}
	live := time.Now().Add(time.Hour)
	putReader("replica-a", live, map[string]server.KeyReaderFile{"token": {Set: "set-1", Generation: 1, Newest: 1}})
	putReader("replica-b", live, map[string]server.KeyReaderFile{"token": {Set: "set-1", Generation: 1, Newest: 1}, "proxy": {}})
	putReader("gone", time.Now().Add(-time.Minute), map[string]server.KeyReaderFile{"token": {Set: "set-1"}})
	putReader("long-gone", time.Now().Add(-2*time.Hour), map[string]server.KeyReaderFile{"token": {Set: "set-1"}})
	putReader("proxy-only", live, map[string]server.KeyReaderFile{"proxy": {}})
	// Readers of another host's token file, or of one naming no set.
	putReader("other-host", live, map[string]server.KeyReaderFile{"token": {Set: "set-2"}})
	putReader("no-set", live, map[string]server.KeyReaderFile{"token": {}})

	f := newFixture(t, "# vmeta-keyset id=set-1\n"+genOne)
	o := f.opts()
	o.Readers = st
	tok := NewToken(o)
	res, err := tok.Rotate(t.Context(), keyrotation.Subject{}, 2, 0, nil)
	if err != nil || res.Done || !strings.Contains(res.Pending, "waiting for 2 metadata reader(s) to load it: replica-a, replica-b") {
		t.Fatalf("Rotate with lagging readers: %+v %v", res, err)
	}
	es := f.entries(t)
	if shape(es) != "c1 n2" {
		t.Fatalf("file while readers lag: %s", shape(es))
	}
	if _, err := st.Record(t.Context(), server.KeyReaderPrefix+"long-gone"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a reader record expired for hours was not deleted: %v", err)
	}
	putReader("replica-a", live, map[string]server.KeyReaderFile{"token": {Set: "set-1", Generation: 1, Newest: 2}})
	if res, _ := tok.Rotate(t.Context(), keyrotation.Subject{}, 2, 0, nil); res.Done || !strings.Contains(res.Pending, "1 metadata reader(s) to load it: replica-b") {
		t.Fatalf("Rotate with one reader lagging: %+v", res)
	}
	putReader("replica-b", live, map[string]server.KeyReaderFile{"token": {Set: "set-1", Generation: 1, Newest: 2}})
	if res, err := tok.Rotate(t.Context(), keyrotation.Subject{}, 2, 0, nil); err != nil || !res.Done {
		t.Fatalf("Rotate once every reader has the key: %+v %v", res, err)
	}
	if got := f.entries(t); shape(got) != "c2 p1" || !bytes.Equal(got[0].Key, es[1].Key) {
		t.Fatalf("file: %s (the distributed key current: %v)", shape(got), bytes.Equal(got[0].Key, es[1].Key))
	}
	if data, _ := os.ReadFile(f.path); server.KeySetOf(data) != "set-1" {
		t.Error("the rotation lost the file's key set")
	}
	// A file naming no set gets one at its first rotation.
	g := newFixture(t, genOne)
	if _, err := NewToken(g.opts()).Rotate(t.Context(), keyrotation.Subject{}, 2, 0, nil); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(g.path); len(server.KeySetOf(data)) != 24 {
		t.Errorf("no key set after the first rotation:\n%s", shape(g.entries(t)))
	}
}

// TestExpireLoop: the loop drops a prior token key once its tokens have
// all expired, without a rotation.
func TestExpireLoop(t *testing.T) {
	f := newFixture(t, genOne)
	tok := NewToken(f.opts())
	if _, err := tok.Rotate(t.Context(), keyrotation.Subject{}, 2, 0, nil); err != nil {
		t.Fatal(err)
	}
	f.clock.Add(TokenRetention)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); tok.ExpireLoop(ctx, time.Millisecond) }()
	deadline := time.Now().Add(30 * time.Second)
	for shape(f.entries(t)) != "c2" {
		if time.Now().After(deadline) {
			t.Fatalf("file %s after 30s of ExpireLoop", shape(f.entries(t)))
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if len(f.file.Ring().All()) != 1 {
		t.Error("the in-process ring still has the expired key")
	}
}

// TestWithEngine runs the rotators under the keyrotation Engine on a real
// store: the status starts at the file's generation, a rotation asked
// through the Engine reaches the file, a pending second phase is
// finished by a later run, and Prune's count is the status's
// priorKeyCount.
func TestWithEngine(t *testing.T) {
	st := stores.Bolt(t)
	f := newFixture(t, "# vmeta-keyset id=engine-set\n# vmeta-key generation=3 state=current\nengine-proxy-secret\n")
	e := keyrotation.New(st, keyrotation.Options{Host: "kf-host", Version: "v1.0.0"})
	o := f.opts()
	o.Readers = st
	prox := NewProxy(o)
	e.Register(keyrotation.Proxy, prox)
	s := keyrotation.Subject{Class: keyrotation.Proxy}
	if err := e.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.Status(t.Context(), s); got.KeyGeneration != 3 {
		t.Fatalf("first status generation %d, want the file's 3", got.KeyGeneration)
	}
	// A reader that has not loaded the next key holds the rotation.
	b, _ := json.Marshal(server.KeyReader{ID: "slow", Keys: map[string]server.KeyReaderFile{"proxy": {Set: "engine-set", Generation: 3, Newest: 3}}, Expires: time.Now().Add(time.Hour)})
	st.PutRecord(t.Context(), server.KeyReaderPrefix+"slow", b, -1)
	if _, err := e.Rotate(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if err := e.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, _ := e.Status(t.Context(), s)
	if got.KeyGeneration != 3 || !strings.Contains(got.Pending, "waiting for 1 metadata reader(s) to load it: slow") {
		t.Fatalf("status while a reader lags: %+v", got)
	}
	b, _ = json.Marshal(server.KeyReader{ID: "slow", Keys: map[string]server.KeyReaderFile{"proxy": {Set: "engine-set", Generation: 3, Newest: 4}}, Expires: time.Now().Add(time.Hour)})
	st.PutRecord(t.Context(), server.KeyReaderPrefix+"slow", b, -1)
	if err := e.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, _ = e.Status(t.Context(), s)
	if got.KeyGeneration != 4 || got.Pending != "" || got.PriorKeyCount == nil || *got.PriorKeyCount != 1 {
		t.Fatalf("status after: %+v", got)
	}
	if shape(f.entries(t)) != "c4 p3" {
		t.Fatalf("file %s", shape(f.entries(t)))
	}
	if got, err := e.Prune(t.Context(), keyrotation.Proxy, 0); err != nil || *got.PriorKeyCount != 0 {
		t.Fatalf("Prune: %+v %v", got, err)
	}
	if shape(f.entries(t)) != "c4" {
		t.Fatalf("file after prune %s", shape(f.entries(t)))
	}
}
