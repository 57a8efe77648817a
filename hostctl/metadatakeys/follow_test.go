package metadatakeys

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
	"github.com/vmeta/vmeta/internal/testenv/stores"
	"github.com/vmeta/vmeta/server"
)

// load is guests and a proxy reading metadata from a replica, counting
// the requests that fail.
type load struct {
	ok, failed atomic.Int64
	tokenOK    atomic.Int64
	proxyOK    atomic.Int64
	mu         sync.Mutex
	failures   []string
}

func (l *load) fail(format string, args ...any) {
	l.failed.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failures) < 20 {
		l.failures = append(l.failures, fmt.Sprintf(format, args...))
	}
}

// run starts guests goroutines (each gets a token, uses it for several
// GETs, then gets another: tokens signed with a key outlive its rotation)
// and proxies goroutines (GETs signed with proxySecret), until ctx is
// done.
//
// There are two replicas behind "one address": a guest gets its token
// from one and uses it on the other, so a replica that has not loaded a
// key the other signs with would fail it.
func (l *load) run(ctx context.Context, wg *sync.WaitGroup, bases []string, guests, proxies int, proxySecret []byte) {
	for range guests {
		wg.Go(func() {
			c := client(guestAddr)
			var tok string
			for i := 0; ctx.Err() == nil; i++ {
				base := bases[i%len(bases)]
				if i%8 == 0 {
					// Tokens come from each replica in turn.
					code, body, err := do(ctx, c, "PUT", bases[(i/8)%len(bases)]+"/latest/api/token", map[string][]string{"X-Aws-Ec2-Metadata-Token-Ttl-Seconds": {"21600"}})
					if ctx.Err() != nil {
						return
					}
					if err != nil || code != 200 {
						l.fail("token PUT: %d %v", code, err)
						continue
					}
					tok = body
				}
				code, body, err := do(ctx, c, "GET", base+"/latest/meta-data/hostname", map[string][]string{"X-Aws-Ec2-Metadata-Token": {tok}})
				if ctx.Err() != nil {
					return
				}
				if err != nil || code != 200 || body != "kf-web.novalocal" {
					l.fail("GET with a token: %d %q %v", code, body, err)
					continue
				}
				l.ok.Add(1)
				l.tokenOK.Add(1)
			}
		})
	}
	for range proxies {
		wg.Go(func() {
			c := client(proxyAddr)
			for i := 0; ctx.Err() == nil; i++ {
				code, body, err := do(ctx, c, "GET", bases[i%len(bases)]+"/latest/meta-data/hostname", proxyHeaders(proxySecret))
				if ctx.Err() != nil {
					return
				}
				if err != nil || code != 200 || body != "kf-web.novalocal" {
					l.fail("GET through the proxy: %d %q %v", code, body, err)
					continue
				}
				l.ok.Add(1)
				l.proxyOK.Add(1)
			}
		})
	}
}

// progress waits until both kinds of clients have had n more successful
// requests (the load really ran across a step).
func (l *load) progress(t *testing.T, n int64) {
	t.Helper()
	tok, prox := l.tokenOK.Load(), l.proxyOK.Load()
	deadline := time.Now().Add(2 * time.Minute)
	for l.tokenOK.Load() < tok+n || l.proxyOK.Load() < prox+n {
		if time.Now().After(deadline) {
			t.Fatalf("the load made no progress (failures %d: %v)", l.failed.Load(), l.failures)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRotateUnderLoad is the test: two replicas of the real
// vmeta-metadata binary, on a real Redis, serve guests that use session tokens and a
// proxy that signs with a secret while the token signing key is rotated
// three times and the proxy secret twice; not one request may fail. The
// replicas check their key files only every hour here, so what they
// follow is the store's change feed; the rotations make a key current
// once every replica's record says it has loaded it. Then the operator prunes the proxy secrets:
// a request signed with the pruned secret gets 403.
//
// Two ways the replicas learn of a rotation: the store's change feed
// (their key check every hour), and, with nothing announced on the feed,
// their key check timer alone — each replica then loads a new file at
// its own moment, which is where a rotation that did not wait for every
// replica would fail tokens (one replica signing with a key the other has
// not loaded yet: here one checks every 50ms, the other every 700ms).
func TestRotateUnderLoad(t *testing.T) {
	t.Run("feed", func(t *testing.T) { rotateUnderLoad(t, true, "1h", "1h") })
	t.Run("timer", func(t *testing.T) { rotateUnderLoad(t, false, "50ms", "700ms") })
}

// seededRedis starts a private redis-server (the tests take it away and
// bring it back) and opens a store on it holding the guest seed puts.
func seededRedis(t *testing.T) (*testenv.RedisServer, store.Store) {
	t.Helper()
	srv := testenv.StartRedisServer(t)
	st := stores.RedisAt(t, srv.URL())
	seed(t, st)
	return srv, st
}

func rotateUnderLoad(t *testing.T, announce bool, check1, check2 string) {
	srv, st := seededRedis(t)

	dir := t.TempDir()
	proxyFile, tokenFile := filepath.Join(dir, "proxy.secret"), filepath.Join(dir, "token.key")
	oldSecret := []byte("the-proxies-secret-before-rotation")
	// (A file naming its key set, as one a rotation wrote: the rotations
	// then wait for every replica, the first one included.)
	if err := os.WriteFile(proxyFile, server.FormatKeyFileSet(server.NewKeySetID(), []server.KeyEntry{{Key: oldSecret, State: server.KeyCurrent}}), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := server.ReadOrCreateKeyFile(tokenFile); err != nil {
		t.Fatal(err)
	}
	var keys allKeys
	keys.add(t, proxyFile, tokenFile)

	r := startReplica(t, srv.URL(), proxyFile, tokenFile, "--key-check-interval", check1)
	r2 := startReplica(t, srv.URL(), proxyFile, tokenFile, "--key-check-interval", check2)
	base := "http://" + r.listen
	bases := []string{base, "http://" + r2.listen}

	var logs testenv.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var l load
	// The rotations are gated as in production: a next key becomes
	// current once every live reader's record says it has it (Readers),
	// after a Delay floor; until then Rotate reports pending and is
	// called again (as the Engine does on its next run) once the clients
	// have made progress with the key distributed.
	waitReader(t, st, "token", 2)
	var notifier store.KeyNotifier
	if announce {
		notifier = st
	}
	tok := NewToken(Options{Path: tokenFile, Notifier: notifier, Readers: st, Delay: 20 * time.Millisecond, Log: log})
	prox := NewProxy(Options{Path: proxyFile, Notifier: notifier, Readers: st, Delay: 20 * time.Millisecond, Log: log})
	pendings := 0
	rotate := func(rot keyrotation.Rotator, class keyrotation.Class, gen int64, keep int) keyrotation.Result {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute) // only ends a broken test
		for {
			if time.Now().After(deadline) {
				t.Fatalf("rotate %s to %d: still pending after 2 minutes", class, gen)
			}
			res, err := rot.Rotate(t.Context(), keyrotation.Subject{Class: class}, gen, keep, nil)
			if err != nil {
				t.Fatalf("rotate %s to %d: %v", class, gen, err)
			}
			keys.add(t, proxyFile, tokenFile)
			if res.Done {
				return res
			}
			pendings++
			l.progress(t, 20)
		}
	}

	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	l.run(ctx, &wg, bases, 3, 2, oldSecret)
	l.progress(t, 50)
	for gen := int64(1); gen <= 3; gen++ {
		// (The created token key file is generation 1.)
		rotate(tok, keyrotation.Token, gen+1, 0)
		for _, r := range []*replica{r, r2} {
			r.waitMetric(t, keyGauge("vmeta_metadata_key_generation", "token"), func(v float64) bool { return v == float64(gen+1) })
		}
		l.progress(t, 50)
		if gen > 2 {
			continue
		}
		res := rotate(prox, keyrotation.Proxy, gen, 2)
		if *res.PriorKeyCount != int(gen) {
			t.Errorf("proxy priorKeyCount %d, want %d", *res.PriorKeyCount, gen)
		}
		for _, r := range []*replica{r, r2} {
			r.waitMetric(t, keyGauge("vmeta_metadata_key_generation", "proxy"), func(v float64) bool { return v == float64(gen) })
		}
		l.progress(t, 50)
	}
	stop()
	wg.Wait()
	t.Logf("requests under rotation: %d succeeded (%d with tokens, %d through the proxy), %d failed; rotations reported pending %d times",
		l.ok.Load(), l.tokenOK.Load(), l.proxyOK.Load(), l.failed.Load(), pendings)
	if n := l.failed.Load(); n != 0 {
		t.Fatalf("%d requests failed during the rotations: %v", n, l.failures)
	}
	if st, _ := tok.State(); st.Generation != 4 || st.PriorKeyCount != 3 || st.Next != 0 {
		t.Errorf("token key file state %+v, want generation 4 with 3 prior keys (all within the token lifetime)", st)
	}

	// The proxies take the new current secret (show --reveal) ...
	cur, err := prox.Current(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	pc := client(proxyAddr)
	if code, _, err := do(t.Context(), pc, "GET", base+"/latest/meta-data/hostname", proxyHeaders(cur)); code != 200 || err != nil {
		t.Fatalf("with the current secret: %d %v", code, err)
	}
	// ... and the operator prunes the prior ones: the old secret is
	// refused with Nova's 403.
	if n, err := prox.Prune(t.Context(), 0); n != 0 || err != nil {
		t.Fatalf("Prune: %d %v", n, err)
	}
	r.waitMetric(t, keyGauge("vmeta_metadata_keys", "proxy"), func(v float64) bool { return v == 1 })
	code, body, err := do(t.Context(), pc, "GET", base+"/latest/meta-data/hostname", proxyHeaders(oldSecret))
	if err != nil || code != 403 || !strings.Contains(body, "Invalid proxy request signature.") {
		t.Errorf("with a pruned secret: %d %q %v, want 403 Invalid proxy request signature.", code, body, err)
	}
	if code, _, err := do(t.Context(), pc, "GET", base+"/latest/meta-data/hostname", proxyHeaders(cur)); code != 200 || err != nil {
		t.Errorf("with the current secret after the prune: %d %v", code, err)
	}
	keys.checkNotIn(t, "the replica's log", r.p.Output())
	keys.checkNotIn(t, "the second replica's log", r2.p.Output())
	keys.checkNotIn(t, "the rotation's log", logs.String())
	for _, p := range []string{proxyFile, tokenFile} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", p, fi, err)
		}
	}
}

// TestReplicaReloadPaths: without any feed message, a replica follows a
// rotation through its key check timer; another, with the timer off in
// effect, through SIGHUP; a broken file keeps the keys it had (and the
// error is logged and counted, never the key).
func TestReplicaReloadPaths(t *testing.T) {
	srv, _ := seededRedis(t)
	dir := t.TempDir()
	secret0 := []byte("reload-paths-secret-zero")
	newFiles := func(name string) (string, string) {
		p, tk := filepath.Join(dir, name+".secret"), filepath.Join(dir, name+".token")
		writeKeyFile(t, p, server.KeyEntry{Key: secret0, State: server.KeyCurrent})
		return p, tk
	}
	pc := client(proxyAddr)
	signedStatus := func(r *replica, secret []byte) int {
		code, _, err := do(t.Context(), pc, "GET", "http://"+r.listen+"/latest/meta-data/hostname", proxyHeaders(secret))
		if err != nil {
			t.Fatal(err)
		}
		return code
	}

	t.Run("timer", func(t *testing.T) {
		p, tk := newFiles("timer")
		r := startReplica(t, srv.URL(), p, tk, "--key-check-interval", "20ms")
		// No notifier: nothing on the feed.
		prox := NewProxy(Options{Path: p, Delay: time.Millisecond})
		if _, err := prox.Rotate(t.Context(), keyrotation.Subject{}, 1, 1, nil); err != nil {
			t.Fatal(err)
		}
		r.waitMetric(t, keyGauge("vmeta_metadata_key_generation", "proxy"), func(v float64) bool { return v == 1 })
		cur, _ := prox.Current(t.Context())
		if c := signedStatus(r, cur); c != 200 {
			t.Errorf("new secret: %d", c)
		}
		if c := signedStatus(r, secret0); c != 200 {
			t.Errorf("prior secret: %d", c)
		}
	})

	t.Run("sighup and a broken file", func(t *testing.T) {
		p, tk := newFiles("hup")
		r := startReplica(t, srv.URL(), p, tk, "--key-check-interval", "1h")
		// The replica reloads its key files once more when it has
		// subscribed to the feed; write the new file only after that.
		if err := r.p.WaitReady(30*time.Second, 5*time.Millisecond, func() error {
			if !strings.Contains(r.p.Output(), "metadata change feed: following") {
				return fmt.Errorf("not following the change feed yet")
			}
			return nil
		}); err != nil {
			t.Fatalf("%v\n%s", err, r.p.Output())
		}
		secret1 := []byte("reload-paths-secret-one")
		writeKeyFile(t, p, server.KeyEntry{Key: secret1, Generation: 7, State: server.KeyCurrent})
		if c := signedStatus(r, secret1); c != 403 {
			t.Fatalf("before SIGHUP the replica knows the new secret: %d", c)
		}
		if err := r.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		r.waitMetric(t, keyGauge("vmeta_metadata_key_generation", "proxy"), func(v float64) bool { return v == 7 })
		if c := signedStatus(r, secret1); c != 200 {
			t.Errorf("after SIGHUP, the new secret: %d", c)
		}
		if c := signedStatus(r, secret0); c != 403 {
			t.Errorf("after SIGHUP, the dropped secret: %d, want 403", c)
		}
		// A broken file: the replica keeps serving with the keys it has.
		broken := "# vmeta-key generation=8 state=current\n# vmeta-key generation=9\nreload-paths-secret-two\n"
		if err := os.WriteFile(p, []byte(broken), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := r.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		r.waitMetric(t, keyGauge("vmeta_metadata_key_reload_errors_total", "proxy"), func(v float64) bool { return v >= 1 })
		if c := signedStatus(r, secret1); c != 200 {
			t.Errorf("after a broken file, the loaded secret: %d", c)
		}
		out := r.p.Output()
		if !strings.Contains(out, "metadata key file reload failed; keeping the keys loaded before") || !strings.Contains(out, "line 1: key annotation not followed by a key") {
			t.Errorf("the broken file was not reported:\n%s", out)
		}
		for _, s := range []string{string(secret0), string(secret1), "reload-paths-secret-two"} {
			if strings.Contains(out, s) {
				t.Errorf("the replica logged a secret (%.12s…)", s)
			}
		}
	})
}

// TestRotationAcrossRedisOutage: Redis goes away between the phases of a
// token key rotation. The rotation cannot learn which readers have the
// new key, so it fails (the Engine records the error and runs it again)
// and the new key is not made current; the replica keeps serving with
// what it has. When Redis is back the rotation finishes with the key it
// distributed, and the replica, which checks its files only hourly here,
// follows (its feed resubscribes and resyncs, then the announcement).
func TestRotationAcrossRedisOutage(t *testing.T) {
	srv, st := seededRedis(t)
	dir := t.TempDir()
	p, tk := filepath.Join(dir, "proxy.secret"), filepath.Join(dir, "token.key")
	writeKeyFile(t, p, server.KeyEntry{Key: []byte("outage-secret"), State: server.KeyCurrent})
	if _, _, err := server.ReadOrCreateKeyFile(tk); err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, srv.URL(), p, tk, "--key-check-interval", "1h")
	waitReader(t, st, "token", 1)
	gc := client(guestAddr)
	hostname := func() (int, error) {
		code, _, err := do(t.Context(), gc, "GET", "http://"+r.listen+"/latest/meta-data/hostname", nil)
		return code, err
	}
	if code, err := hostname(); code != 200 || err != nil { // (cached from now on)
		t.Fatalf("the replica: %d %v", code, err)
	}
	var logs testenv.SyncBuffer
	o := Options{Path: tk, Notifier: st, Readers: st, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	o.Wait = func(context.Context, int64, time.Time) error {
		r.waitMetric(t, keyGauge("vmeta_metadata_key_newest_generation", "token"), func(v float64) bool { return v >= 2 })
		srv.Stop()
		return nil
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := NewToken(o).Rotate(ctx, keyrotation.Subject{}, 2, 0, nil); err == nil || !strings.Contains(err.Error(), "which readers have generation 2") {
		t.Fatalf("rotation with Redis away: %v, want an error", err)
	}
	es, err := server.ParseKeyFile(must(os.ReadFile(tk)))
	if err != nil || shape(es) != "c1 n2" {
		t.Fatalf("file with Redis away: %s %v, want the new key distributed, not current", shape(es), err)
	}
	// The replica serves on with what it has.
	if code, err := hostname(); code != 200 || err != nil {
		t.Errorf("the replica with Redis away: %d %v", code, err)
	}
	srv.Start()
	o.Wait = nil
	o.Delay = time.Millisecond
	for {
		res, err := NewToken(o).Rotate(ctx, keyrotation.Subject{}, 2, 0, nil)
		if err == nil && res.Done {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the rotation did not finish after Redis came back: %+v %v", res, err)
		}
		time.Sleep(10 * time.Millisecond) // the Engine's next run
	}
	got, _ := server.ParseKeyFile(must(os.ReadFile(tk)))
	if shape(got) != "c2 p1" || !bytes.Equal(got[0].Key, es[1].Key) {
		t.Fatalf("file after: %s (the distributed key current: %v)", shape(got), bytes.Equal(got[0].Key, es[1].Key))
	}
	r.waitMetric(t, keyGauge("vmeta_metadata_key_generation", "token"), func(v float64) bool { return v == 2 })
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// waitReader waits until n live readers' records list the key file name.
func waitReader(t *testing.T, st store.Records, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		rs, err := server.KeyReaders(t.Context(), st, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		c := 0
		for _, r := range rs {
			if _, ok := r.Keys[name]; ok {
				c++
			}
		}
		if c >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d readers with %s keys after a minute, want %d", c, name, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
