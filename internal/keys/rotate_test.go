package keys_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/redis"
	"github.com/vmeta/vmeta/internal/testenv"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// seeded is a set of secrets made for a rotation test, with what each
// must unwrap to.
type seeded struct {
	pass    map[string][]byte // uuid -> passphrase
	pending map[string][]byte // uuid -> pending passphrase
}

// seed creates n secrets with m (every third with a pending passphrase,
// every fifth with a passphrase a user brought).
func seed(t testing.TB, m *keys.Manager, n int) seeded {
	t.Helper()
	ctx := context.Background()
	s := seeded{pass: map[string][]byte{}, pending: map[string][]byte{}}
	for i := range n {
		req := keys.Request{ProjectID: "p", Owner: &keys.Owner{InstanceUUID: keys.NewUUID(), Disk: "vdb"}}
		if i%5 == 4 {
			req.Payload = []byte(fmt.Sprintf("user passphrase %d", i))
		}
		sec, err := m.Create(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		p, err := m.Passphrase(ctx, sec.UUID)
		if err != nil {
			t.Fatal(err)
		}
		s.pass[sec.UUID] = p
		if i%3 == 0 {
			pend := []byte(keys.NewUUID() + keys.NewUUID())
			if err := m.SetPendingForTest(ctx, sec.UUID, pend); err != nil {
				t.Fatal(err)
			}
			s.pending[sec.UUID] = pend
		}
	}
	return s
}

// verify checks that every seeded secret (and pending passphrase) unwraps
// to its value with m, all wrapped under generation gen, and that the key
// file has gen alone. It returns the problems found (empty: nothing lost).
func (s seeded) verify(ctx context.Context, m *keys.Manager, gen int64) []string {
	var bad []string
	for id, want := range s.pass {
		got, err := m.Passphrase(ctx, id)
		if err != nil || !bytes.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("secret %s: %v (value matches: %v)", id, err, bytes.Equal(got, want)))
			continue
		}
		if sec, err := m.Get(ctx, id); err != nil || sec.Generation != gen {
			bad = append(bad, fmt.Sprintf("secret %s: metadata generation %d, %v; want %d", id, sec.Generation, err, gen))
		}
		wg, pg, err := m.WrappedGenerationsForTest(ctx, id)
		if err != nil || wg != gen || (s.pending[id] != nil && pg != gen) {
			bad = append(bad, fmt.Sprintf("secret %s: wrapped under %d, pending under %d, %v; want %d", id, wg, pg, err, gen))
		}
	}
	for id, want := range s.pending {
		got, err := m.PendingForTest(ctx, id)
		if err != nil || !bytes.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("pending passphrase of %s: %v (value matches: %v)", id, err, bytes.Equal(got, want)))
		}
	}
	if k := m.KEK(); k.Current != gen || !slices.Equal(k.Generations, []int64{gen}) {
		bad = append(bad, fmt.Sprintf("key file: current %d, generations %v; want %d alone", k.Current, k.Generations, gen))
	}
	slices.Sort(bad)
	return bad
}

// fileGenerations reads the generations in a data directory's key file.
func fileGenerations(t testing.TB, dir string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, keys.KEKFile))
	if err != nil {
		t.Fatal(err)
	}
	var kf struct {
		Current int64             `json:"current"`
		Keys    map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(b, &kf); err != nil {
		t.Fatal(err)
	}
	return kf.Keys
}

func TestRotateKEK(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			st, _ := b.open(t)
			dir := t.TempDir()
			m := openManager(t, st, dir, keys.Options{Host: "h1", RotateBatch: 16})
			if k := m.KEK(); !k.Created || k.Current != 1 {
				t.Fatalf("KEK() = %+v; want created at generation 1", k)
			}
			s := seed(t, m, 100)
			// Another host's secrets in the same store: never touched.
			other := openManager(t, st, t.TempDir(), keys.Options{Host: "h2"})
			os2 := seed(t, other, 10)
			before := otherRecords(t, st, other)

			var calls [][2]int
			res, err := m.RotateKEK(ctx, 2, func(done, total int) { calls = append(calls, [2]int{done, total}) })
			if err != nil {
				t.Fatal(err)
			}
			// 100 secrets + the check record rewrapped.
			if !res.NewKey || res.Generation != 2 || res.Rewrapped != 101 || !slices.Equal(res.Retired, []int64{1}) {
				t.Fatalf("RotateKEK(2) = %+v", res)
			}
			last := calls[len(calls)-1]
			if calls[0] != [2]int{0, 100} || last != [2]int{100, 100} || len(calls) != 1+7 { // ceil(100/16) batches
				t.Fatalf("progress calls %v; want 0/100 … 100/100 in 7 batches", calls)
			}
			for i := 1; i < len(calls); i++ {
				if calls[i][0] < calls[i-1][0] {
					t.Fatalf("progress went back: %v", calls)
				}
			}
			if bad := s.verify(ctx, m, 2); len(bad) > 0 {
				t.Fatalf("after rotation: %v", bad)
			}
			if g := fileGenerations(t, dir); len(g) != 1 || g["2"] == "" {
				t.Fatalf("key file generations %v; want 2 alone", slices.Collect(maps.Keys(g)))
			}
			if fi, err := os.Stat(filepath.Join(dir, keys.KEKFile)); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("key file after rotation: %v, %v; want mode 0600", fi, err)
			}
			if after := otherRecords(t, st, other); !equalRecords(before, after) {
				t.Fatal("another host's secret records changed")
			}
			if bad := os2.verify(ctx, other, 1); len(bad) > 0 {
				t.Fatalf("other host: %v", bad)
			}

			// Idempotent: the same generation again does nothing.
			res, err = m.RotateKEK(ctx, 2, nil)
			if err != nil || res.NewKey || res.Rewrapped != 0 || len(res.Retired) != 0 || res.Generation != 2 {
				t.Fatalf("RotateKEK(2) again = %+v, %v; want nothing done", res, err)
			}
			// Generations need not be consecutive; a lower one is a no-op.
			if res, err = m.RotateKEK(ctx, 5, nil); err != nil || res.Generation != 5 || !slices.Equal(res.Retired, []int64{2}) {
				t.Fatalf("RotateKEK(5) = %+v, %v", res, err)
			}
			if res, err = m.RotateKEK(ctx, 3, nil); err != nil || res.NewKey || res.Generation != 5 {
				t.Fatalf("RotateKEK(3) after 5 = %+v, %v; want nothing done", res, err)
			}
			if _, err := m.RotateKEK(ctx, 0, nil); !errors.Is(err, keys.ErrInvalid) || !strings.Contains(err.Error(), "key generation 0") {
				t.Fatalf("RotateKEK(0) = %v; want ErrInvalid naming the generation", err)
			}
			// A new manager (restart) reads the rotated file and store.
			m2, err := keys.Open(ctx, st, dir, keys.Options{Host: "h1"})
			if err != nil {
				t.Fatalf("reopen after rotation: %v", err)
			}
			if k := m2.KEK(); k.Created || k.Current != 5 {
				t.Fatalf("KEK() after reopen = %+v; want not created, generation 5", k)
			}
			if bad := s.verify(ctx, m2, 5); len(bad) > 0 {
				t.Fatalf("after reopen: %v", bad)
			}
		})
	}
}

// otherRecords returns the secret records wrapped by m's key, and its
// check record.
func otherRecords(t *testing.T, st store.Records, m *keys.Manager) []store.Record {
	t.Helper()
	recs, err := st.Records(context.Background(), "keys/")
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Record
	for _, r := range recs {
		if bytes.Contains(r.Value, []byte(`"key_id":"`+m.KeyID()+`"`)) {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		t.Fatal("no records of the other host")
	}
	return out
}

func equalRecords(a, b []store.Record) bool {
	return slices.EqualFunc(a, b, func(x, y store.Record) bool {
		return x.Key == y.Key && x.Version == y.Version && bytes.Equal(x.Value, y.Value)
	})
}

// untilStopped runs step(from), step(from+1), … on a goroutine of wg
// until stop is closed or step returns false.
func untilStopped(wg *sync.WaitGroup, stop <-chan struct{}, from int, step func(i int) bool) {
	wg.Go(func() {
		for i := from; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if !step(i) {
				return
			}
		}
	})
}

// TestRotateKEKConcurrent: secrets are created, read and deleted while a
// rotation runs; no read fails, and afterwards every secret left unwraps
// and uses the new generation alone.
func TestRotateKEKConcurrent(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			st, _ := b.open(t)
			dir := t.TempDir()
			m := openManager(t, st, dir, keys.Options{Host: "h1", RotateBatch: 8})
			s := seed(t, m, 200)
			ids := slices.Sorted(maps.Keys(s.pass))
			orig := maps.Clone(s.pass)
			var mu sync.Mutex // guards s while the workers change it
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var failures atomic.Int64
			var ops, pendingWrites atomic.Int64
			fail := func(format string, args ...any) {
				failures.Add(1)
				t.Errorf(format, args...)
			}
			// Readers: every secret read during the rotation unwraps.
			for w := range 2 {
				untilStopped(&wg, stop, w, func(i int) bool {
					id := ids[i%len(ids)]
					got, err := m.Passphrase(ctx, id)
					mu.Lock()
					_, live := s.pass[id]
					mu.Unlock()
					switch {
					case errors.Is(err, keys.ErrNotFound) && !live:
						// deleted by the writer
					case err != nil:
						fail("read %s during rotation: %v", id, err)
					case !bytes.Equal(got, orig[id]):
						fail("read %s during rotation: not its passphrase", id)
					}
					ops.Add(1)
					return true
				})
			}
			// A writer of pending passphrases (a disk passphrase rotation
			// running at the same time): its writes conflict with the
			// rotation's, which re-reads and rewraps again.
			untilStopped(&wg, stop, 0, func(i int) bool {
				id := ids[(i*13+5)%len(ids)]
				pend := []byte(keys.NewUUID())
				mu.Lock()
				_, live := s.pass[id]
				mu.Unlock()
				if !live {
					return true
				}
				err := m.SetPendingForTest(ctx, id, pend)
				switch {
				case err == nil:
					mu.Lock()
					if _, live := s.pass[id]; live {
						s.pending[id] = pend
					}
					mu.Unlock()
					pendingWrites.Add(1)
				case errors.Is(err, keys.ErrNotFound), errors.Is(err, store.ErrConflict):
					// deleted, or rewrapped by the rotation meanwhile
				default:
					fail("set pending during rotation: %v", err)
					return false
				}
				ops.Add(1)
				return true
			})
			// A writer: creates and deletes secrets.
			untilStopped(&wg, stop, 0, func(i int) bool {
				sec, err := m.Create(ctx, keys.Request{ProjectID: "p"})
				if err != nil {
					fail("create during rotation: %v", err)
					return false
				}
				p, err := m.Passphrase(ctx, sec.UUID)
				if err != nil {
					fail("read new secret: %v", err)
					return false
				}
				mu.Lock()
				s.pass[sec.UUID] = p
				mu.Unlock()
				victim := ids[(i*7)%len(ids)]
				mu.Lock()
				_, live := s.pass[victim]
				if live {
					delete(s.pass, victim)
					delete(s.pending, victim)
				}
				mu.Unlock()
				if live {
					if err := m.Delete(ctx, victim); err != nil {
						fail("delete during rotation: %v", err)
					}
				}
				ops.Add(1)
				return true
			})
			// Let the workers get going before the rotation starts, and
			// keep them going until it ends (rotation progress, not time).
			for ops.Load() < 20 && failures.Load() == 0 {
				if _, err := m.Get(ctx, ids[0]); err != nil && !errors.Is(err, keys.ErrNotFound) {
					t.Fatal(err)
				}
			}
			var last [2]int
			res, err := m.RotateKEK(ctx, 2, func(done, total int) { last = [2]int{done, total} })
			close(stop)
			wg.Wait()
			if err != nil {
				t.Fatalf("RotateKEK: %v", err)
			}
			t.Logf("rotation: %+v, %d concurrent operations (%d pending passphrases written), progress at the end %d/%d", res, ops.Load(), pendingWrites.Load(), last[0], last[1])
			if last[0] != last[1] || last[1] == 0 {
				t.Errorf("progress ended at %d/%d; want every secret found done", last[0], last[1])
			}
			if bad := s.verify(ctx, m, 2); len(bad) > 0 {
				t.Fatalf("after rotation: %d problems, first %v", len(bad), bad[0])
			}
			all, err := m.List(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(all) != len(s.pass) {
				t.Fatalf("%d secrets stored, %d expected", len(all), len(s.pass))
			}
		})
	}
}

// TestRotateKEKStopsAtUnreadableSecret: a secret whose wrapped value does
// not unwrap (altered in the store) stops the rotation with an error
// naming it, before any generation is retired; once it is deleted, the
// same call finishes.
func TestRotateKEKStopsAtUnreadableSecret(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			st, _ := b.open(t)
			m := openManager(t, st, t.TempDir(), keys.Options{Host: "h1", RotateBatch: 4})
			s := seed(t, m, 20)
			var bad string
			for id := range s.pass {
				bad = id
				break
			}
			rec, err := st.Record(ctx, "keys/secret/"+bad)
			if err != nil {
				t.Fatal(err)
			}
			var v map[string]json.RawMessage
			if err := json.Unmarshal(rec.Value, &v); err != nil {
				t.Fatal(err)
			}
			var w store.WrappedSecret
			if err := json.Unmarshal(v["wrapped"], &w); err != nil {
				t.Fatal(err)
			}
			w.Ciphertext[0] ^= 0xff
			v["wrapped"], _ = json.Marshal(w)
			altered, _ := json.Marshal(v)
			if _, err := st.PutRecord(ctx, rec.Key, altered, rec.Version); err != nil {
				t.Fatal(err)
			}

			_, err = m.RotateKEK(ctx, 2, nil)
			if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "authentication failed") {
				t.Fatalf("RotateKEK with an altered secret = %v; want an error naming secret %s", err, bad)
			}
			if k := m.KEK(); k.Current != 2 || !slices.Equal(k.Generations, []int64{1, 2}) {
				t.Fatalf("after the failed rotation: %+v; want every generation kept", k)
			}
			delete(s.pass, bad)
			delete(s.pending, bad)
			for id, want := range s.pass {
				if got, err := m.Passphrase(ctx, id); err != nil || !bytes.Equal(got, want) {
					t.Fatalf("secret %s after the failed rotation: %v", id, err)
				}
			}
			if err := m.Delete(ctx, bad); err != nil {
				t.Fatal(err)
			}
			res, err := m.RotateKEK(ctx, 2, nil)
			if err != nil || res.NewKey || !slices.Equal(res.Retired, []int64{1}) {
				t.Fatalf("RotateKEK after the altered secret was deleted = %+v, %v", res, err)
			}
			if problems := s.verify(ctx, m, 2); len(problems) > 0 {
				t.Fatal(problems)
			}
		})
	}
}

// TestRotateKEKCluster: on a Redis Cluster the secrets hash to slots on
// every node; the rotation's batches (pipelines that go-redis splits by
// node) rewrap them all.
func TestRotateKEKCluster(t *testing.T) {
	ctx := context.Background()
	st, err := redis.Open(ctx, testenv.ClusterURL(testenv.StartRedisCluster(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m := openManager(t, st, t.TempDir(), keys.Options{Host: "h1", RotateBatch: 64})
	s := seed(t, m, 300)
	res, err := m.RotateKEK(ctx, 2, nil)
	if err != nil || res.Rewrapped != 301 {
		t.Fatalf("RotateKEK(2) = %+v, %v", res, err)
	}
	if bad := s.verify(ctx, m, 2); len(bad) > 0 {
		t.Fatalf("after rotation on a cluster: %v", bad)
	}
}

// TestOpenRefusesKeyFileOlderThanRotation: a key file restored from a
// backup taken before a rotation lacks the generation the store now uses;
// Open refuses it with ErrKEK naming the generations, and changes
// nothing.
func TestOpenRefusesKeyFileOlderThanRotation(t *testing.T) {
	ctx := context.Background()
	st := stores.Bolt(t)
	dir := t.TempDir()
	m := openManager(t, st, dir, keys.Options{Host: "h1"})
	s := seed(t, m, 5)
	kf := filepath.Join(dir, keys.KEKFile)
	backup, err := os.ReadFile(kf)
	if err != nil {
		t.Fatal(err)
	}
	rotated := func() []byte {
		if _, err := m.RotateKEK(ctx, 2, nil); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(kf)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}()
	if err := os.WriteFile(kf, backup, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = keys.Open(ctx, st, dir, keys.Options{Host: "h1"})
	if !errors.Is(err, keys.ErrKEK) || !strings.Contains(err.Error(), "has generations [1]") || !strings.Contains(err.Error(), "generation 2") {
		t.Fatalf("Open with a key file from before the rotation = %v; want ErrKEK naming the generations", err)
	}
	if b, _ := os.ReadFile(kf); !bytes.Equal(b, backup) {
		t.Fatal("Open changed the key file")
	}
	if err := os.WriteFile(kf, rotated, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err = keys.Open(ctx, st, dir, keys.Options{Host: "h1"})
	if err != nil {
		t.Fatal(err)
	}
	if bad := s.verify(ctx, m, 2); len(bad) > 0 {
		t.Fatal(bad)
	}
}
