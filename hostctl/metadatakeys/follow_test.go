package metadatakeys

import (
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
	"github.com/vmeta/vmeta/internal/store/storeurl"
	"github.com/vmeta/vmeta/internal/testenv"
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
func (l *load) run(ctx context.Context, wg *sync.WaitGroup, base string, guests, proxies int, proxySecret []byte) {
	for range guests {
		wg.Go(func() {
			c := client(guestAddr)
			var tok string
			for i := 0; ctx.Err() == nil; i++ {
				if i%8 == 0 {
					code, body, err := do(ctx, c, "PUT", base+"/latest/api/token", map[string][]string{"X-Aws-Ec2-Metadata-Token-Ttl-Seconds": {"21600"}})
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
			for ctx.Err() == nil {
				code, body, err := do(ctx, c, "GET", base+"/latest/meta-data/hostname", proxyHeaders(proxySecret))
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

// TestRotateUnderLoad is the test: the real vmeta-metadata
// binary, on a real Redis, serves guests that use session tokens and a
// proxy that signs with a secret while the token signing key is rotated
// three times and the proxy secret twice; not one request may fail. The
// replica checks its key files only every hour here, so what it follows
// is the store's change feed. Then the operator prunes the proxy secrets:
// a request signed with the pruned secret gets 403.
func TestRotateUnderLoad(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	st, err := storeurl.Open(t.Context(), srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	seed(t, st)

	dir := t.TempDir()
	proxyFile, tokenFile := filepath.Join(dir, "proxy.secret"), filepath.Join(dir, "token.key")
	oldSecret := []byte("the-proxies-secret-before-rotation")
	writeKeyFile(t, proxyFile, server.KeyEntry{Key: oldSecret, State: server.KeyCurrent})
	if _, _, err := server.ReadOrCreateKeyFile(tokenFile); err != nil {
		t.Fatal(err)
	}
	var keys allKeys
	keys.add(t, proxyFile, tokenFile)

	r := startReplica(t, srv.URL(), proxyFile, tokenFile, "--key-check-interval", "1h")
	base := "http://" + r.listen

	var logs testenv.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var l load
	// The rotation waits until the replica has loaded the next key, then
	// until the clients have made progress with it distributed.
	waitFor := func(class string) func(context.Context, int64, time.Time) error {
		return func(_ context.Context, gen int64, _ time.Time) error {
			keys.add(t, proxyFile, tokenFile)
			r.waitMetric(t, keyGauge("vmeta_metadata_key_newest_generation", class), func(v float64) bool { return v >= float64(gen) })
			l.progress(t, 50)
			return nil
		}
	}
	tok := NewToken(Options{Path: tokenFile, Notifier: st, Wait: waitFor("token"), Log: log})
	prox := NewProxy(Options{Path: proxyFile, Notifier: st, Wait: waitFor("proxy"), Log: log})

	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	l.run(ctx, &wg, base, 3, 2, oldSecret)
	l.progress(t, 50)
	for gen := int64(2); gen <= 4; gen++ {
		if _, err := tok.Rotate(t.Context(), keyrotation.Subject{Class: keyrotation.Token}, gen, 0, nil); err != nil {
			t.Fatalf("rotate the token key to %d: %v", gen, err)
		}
		keys.add(t, tokenFile)
		r.waitMetric(t, keyGauge("vmeta_metadata_key_generation", "token"), func(v float64) bool { return v == float64(gen) })
		l.progress(t, 50)
		if gen > 3 {
			continue
		}
		pgen := gen - 1
		res, err := prox.Rotate(t.Context(), keyrotation.Subject{Class: keyrotation.Proxy}, pgen, 2, nil)
		if err != nil {
			t.Fatalf("rotate the proxy secret to %d: %v", pgen, err)
		}
		keys.add(t, proxyFile)
		if *res.PriorKeyCount != int(pgen) {
			t.Errorf("proxy priorKeyCount %d, want %d", *res.PriorKeyCount, pgen)
		}
		r.waitMetric(t, keyGauge("vmeta_metadata_key_generation", "proxy"), func(v float64) bool { return v == float64(pgen) })
		l.progress(t, 50)
	}
	stop()
	wg.Wait()
	t.Logf("requests under rotation: %d succeeded (%d with tokens, %d through the proxy), %d failed",
		l.ok.Load(), l.tokenOK.Load(), l.proxyOK.Load(), l.failed.Load())
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
	srv := testenv.StartRedisServer(t)
	st, err := storeurl.Open(t.Context(), srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	seed(t, st)
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
// token key rotation. The rotation still finishes (the file is the truth;
// the announcement is best effort and says it failed), and the replica,
// which checks its files only hourly here, loads the new current key when
// Redis is back (its feed resubscribes and resyncs).
func TestRotationAcrossRedisOutage(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	st, err := storeurl.Open(t.Context(), srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	seed(t, st)
	dir := t.TempDir()
	p, tk := filepath.Join(dir, "proxy.secret"), filepath.Join(dir, "token.key")
	writeKeyFile(t, p, server.KeyEntry{Key: []byte("outage-secret"), State: server.KeyCurrent})
	if _, _, err := server.ReadOrCreateKeyFile(tk); err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, srv.URL(), p, tk, "--key-check-interval", "1h")
	var logs testenv.SyncBuffer
	tok := NewToken(Options{Path: tk, Notifier: st, Log: slog.New(slog.NewTextHandler(&logs, nil)),
		Wait: func(context.Context, int64, time.Time) error {
			r.waitMetric(t, keyGauge("vmeta_metadata_key_newest_generation", "token"), func(v float64) bool { return v >= 2 })
			srv.Stop()
			return nil
		}})
	if _, err := tok.Rotate(t.Context(), keyrotation.Subject{}, 2, 0, nil); err != nil {
		t.Fatalf("rotation with Redis away: %v", err)
	}
	if !strings.Contains(logs.String(), "could not announce") {
		t.Errorf("the failed announcement was not logged:\n%s", logs.String())
	}
	if v := r.metric(t, keyGauge("vmeta_metadata_key_generation", "token")); v != 0 {
		t.Fatalf("the replica has token generation %v while Redis is away, want 0, the created key's (nothing told it)", v)
	}
	srv.Start()
	r.waitMetric(t, keyGauge("vmeta_metadata_key_generation", "token"), func(v float64) bool { return v == 2 })
}
