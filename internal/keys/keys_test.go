package keys_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/redis"
	"github.com/vmeta/vmeta/internal/testenv"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

type backend struct {
	name string
	open func(t testing.TB) (store.Store, func(t testing.TB) [][]byte)
}

// backends are the real stores; each also returns a function that reads
// every byte the backend holds (the raw bolt file, every Redis key's dump).
func backends() []backend {
	return []backend{
		{"bolt", func(t testing.TB) (store.Store, func(t testing.TB) [][]byte) {
			p := filepath.Join(t.TempDir(), "vmeta.db")
			st := stores.BoltAt(t, p)
			return st, func(t testing.TB) [][]byte {
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				return [][]byte{b}
			}
		}},
		{"redis", func(t testing.TB) (store.Store, func(t testing.TB) [][]byte) {
			url := testenv.StartRedis(t)
			st, err := redis.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st, func(t testing.TB) [][]byte { return redisDump(t, url) }
		}},
	}
}

// openManager opens the key manager of st with its key file in dir.
func openManager(t testing.TB, st keys.Store, dir string, opts keys.Options) *keys.Manager {
	t.Helper()
	m, err := keys.Open(context.Background(), st, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// redisDump returns DUMP of every key (and the key names themselves).
func redisDump(t testing.TB, url string) [][]byte {
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opt)
	defer c.Close()
	ctx := context.Background()
	ks, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(ks) == 0 {
		t.Fatal("redis holds no keys")
	}
	var out [][]byte
	for _, k := range ks {
		d, err := c.Dump(ctx, k).Result()
		if err != nil {
			t.Fatalf("dump %s: %v", k, err)
		}
		out = append(out, []byte(k), []byte(d))
	}
	return out
}

func TestSecretsNeverStoredInPlain(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			st, raw := b.open(t)
			dir := t.TempDir()
			m := openManager(t, st, dir, keys.Options{Host: "h1"})
			var passes [][]byte
			for i := range 5 {
				s, err := m.Create(ctx, keys.Request{Name: "disk", ProjectID: "p1",
					Owner: &keys.Owner{InstanceUUID: keys.NewUUID(), Disk: "vd" + string(rune('b'+i))}})
				if err != nil {
					t.Fatal(err)
				}
				p, err := m.Passphrase(ctx, s.UUID)
				if err != nil {
					t.Fatal(err)
				}
				if len(p) != 2*keys.PassphraseBytes {
					t.Fatalf("passphrase of %d bytes, want %d", len(p), 2*keys.PassphraseBytes)
				}
				passes = append(passes, p)
			}
			brought := []byte("a passphrase a user brought along")
			if _, err := m.Create(ctx, keys.Request{ProjectID: "p2", Payload: brought}); err != nil {
				t.Fatal(err)
			}
			passes = append(passes, brought)
			// A pending passphrase (a disk passphrase rotation in
			// progress), then a KEK rotation: neither the passphrases
			// nor any generation of the KEK is ever in the store.
			list, err := m.List(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			pending := []byte(strings.Repeat("9f", keys.PassphraseBytes))
			if err := m.SetPendingForTest(ctx, list[0].UUID, pending); err != nil {
				t.Fatal(err)
			}
			passes = append(passes, pending)
			keks := [][]byte{kekBytes(t, dir, "1")}
			checkRaw := func(when string) {
				t.Helper()
				for _, blob := range raw(t) {
					for i, p := range passes {
						raw, _ := hex.DecodeString(string(p))
						for _, needle := range [][]byte{p, raw} {
							if len(needle) > 0 && bytes.Contains(blob, needle) {
								t.Fatalf("%s: passphrase %d found in the store's raw bytes", when, i)
							}
						}
					}
					for g, kek := range keks {
						if bytes.Contains(blob, kek) || bytes.Contains(blob, []byte(hex.EncodeToString(kek))) {
							t.Fatalf("%s: generation %d of the key-encryption key is in the store", when, g+1)
						}
					}
				}
				if fi, err := os.Stat(filepath.Join(dir, keys.KEKFile)); err != nil || fi.Mode().Perm() != 0o600 {
					t.Fatalf("%s: key file: %v, %v; want mode 0600", when, fi, err)
				}
			}
			checkRaw("before rotation")
			if _, err := m.RotateKEK(ctx, 2, nil); err != nil {
				t.Fatal(err)
			}
			keks = append(keks, kekBytes(t, dir, "2"))
			checkRaw("after a key-encryption key rotation")
		})
	}
}

func kekBytes(t *testing.T, dir, gen string) []byte {
	b, err := os.ReadFile(filepath.Join(dir, keys.KEKFile))
	if err != nil {
		t.Fatal(err)
	}
	var kf struct {
		Keys map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(b, &kf); err != nil {
		t.Fatal(err)
	}
	k, _ := hex.DecodeString(kf.Keys[gen])
	if len(k) != 32 {
		t.Fatalf("key of %d bytes", len(k))
	}
	return k
}

func TestLifecycle(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			st, _ := b.open(t)
			dir := t.TempDir()
			m := openManager(t, st, dir, keys.Options{Host: "h1"})
			a, err := m.Create(ctx, keys.Request{Name: "a", ProjectID: "p1"})
			if err != nil {
				t.Fatal(err)
			}
			bb, err := m.Create(ctx, keys.Request{Name: "b", ProjectID: "p2", Payload: []byte("pw")})
			if err != nil {
				t.Fatal(err)
			}
			if l, _ := m.List(ctx, "p1"); len(l) != 1 || l[0].UUID != a.UUID {
				t.Fatalf("List(p1) = %+v", l)
			}
			if l, _ := m.List(ctx, ""); len(l) != 2 {
				t.Fatalf("List() = %+v", l)
			}
			got, err := m.Get(ctx, bb.UUID)
			if err != nil || got.Name != "b" || got.ProjectID != "p2" || got.KeyID != m.KeyID() || got.Generation != 1 {
				t.Fatalf("Get = %+v, %v", got, err)
			}
			if p, _ := m.Passphrase(ctx, bb.UUID); string(p) != "pw" {
				t.Fatalf("passphrase %q", p)
			}
			// A second Open of the same data directory and store reads
			// the same key.
			m2 := openManager(t, st, dir, keys.Options{Host: "h1"})
			if p, err := m2.Passphrase(ctx, bb.UUID); err != nil || string(p) != "pw" {
				t.Fatalf("after reopen: %q, %v", p, err)
			}
			if err := m.Delete(ctx, a.UUID); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Get(ctx, a.UUID); !errors.Is(err, keys.ErrNotFound) {
				t.Fatalf("Get deleted: %v", err)
			}
			if err := m.Delete(ctx, a.UUID); !errors.Is(err, keys.ErrNotFound) {
				t.Fatalf("Delete twice: %v", err)
			}
		})
	}
}

// TestCiphertextBoundToSecret: a wrapped value moved to another secret's
// record does not unwrap (the UUID is additional data).
func TestCiphertextBoundToSecret(t *testing.T) {
	ctx := context.Background()
	st := stores.Bolt(t)
	m := openManager(t, st, t.TempDir(), keys.Options{Host: "h1"})
	a, _ := m.Create(ctx, keys.Request{ProjectID: "p"})
	b, _ := m.Create(ctx, keys.Request{ProjectID: "p"})
	ra, _ := st.Record(ctx, "keys/secret/"+a.UUID)
	rb, _ := st.Record(ctx, "keys/secret/"+b.UUID)
	var va, vb map[string]json.RawMessage
	json.Unmarshal(ra.Value, &va)
	json.Unmarshal(rb.Value, &vb)
	vb["wrapped"] = va["wrapped"]
	nb, _ := json.Marshal(vb)
	if _, err := st.PutRecord(ctx, rb.Key, nb, rb.Version); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Passphrase(ctx, b.UUID); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("swapped ciphertext unwrapped: %v", err)
	}
	if _, err := m.Passphrase(ctx, a.UUID); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesMissingOrWrongKey(t *testing.T) {
	ctx := context.Background()
	st := stores.Bolt(t)
	dir := t.TempDir()
	m := openManager(t, st, dir, keys.Options{Host: "h1"})
	s, _ := m.Create(ctx, keys.Request{ProjectID: "p"})
	kf := filepath.Join(dir, keys.KEKFile)
	orig, _ := os.ReadFile(kf)

	tests := []struct {
		name  string
		setup func(t *testing.T)
		want  string
	}{
		{"missing", func(t *testing.T) { os.Remove(kf) }, "is missing, but the store holds secrets"},
		{"another data directory's key", func(t *testing.T) {
			other := t.TempDir()
			st2 := stores.Bolt(t)
			if _, err := keys.Open(ctx, st2, other, keys.Options{Host: "h1"}); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(filepath.Join(other, keys.KEKFile))
			os.WriteFile(kf, b, 0o600)
		}, "is not this host's key file"},
		{"same id, other key", func(t *testing.T) {
			var v map[string]any
			json.Unmarshal(orig, &v)
			v["keys"] = map[string]string{"1": strings.Repeat("ab", 32)}
			b, _ := json.Marshal(v)
			os.WriteFile(kf, b, 0o600)
		}, "does not unwrap the store's check record"},
		{"readable by others", func(t *testing.T) { os.Chmod(kf, 0o644) }, "readable by its owner only"},
		{"not a key file", func(t *testing.T) { os.WriteFile(kf, []byte("{}"), 0o600) }, "not a key file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(kf, orig, 0o600); err != nil {
				t.Fatal(err)
			}
			os.Chmod(kf, 0o600)
			tc.setup(t)
			before, _ := os.ReadFile(kf)
			_, err := keys.Open(ctx, st, dir, keys.Options{Host: "h1"})
			if !errors.Is(err, keys.ErrKEK) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open = %v; want ErrKEK containing %q", err, tc.want)
			}
			after, _ := os.ReadFile(kf)
			if !bytes.Equal(before, after) {
				t.Fatal("Open changed the key file")
			}
		})
	}
	// The original key still opens, and the secret is intact.
	os.WriteFile(kf, orig, 0o600)
	os.Chmod(kf, 0o600)
	m = openManager(t, st, dir, keys.Options{Host: "h1"})
	if _, err := m.Passphrase(ctx, s.UUID); err != nil {
		t.Fatal(err)
	}
}

// TestOpenNewKeyWhenNothingDependsOnIt: a data directory replaced while
// the store holds no secret of its key gets a new key.
func TestOpenNewKeyWhenNothingDependsOnIt(t *testing.T) {
	ctx := context.Background()
	st := stores.Bolt(t)
	m1 := openManager(t, st, t.TempDir(), keys.Options{Host: "h1"})
	m2, err := keys.Open(ctx, st, t.TempDir(), keys.Options{Host: "h1"})
	if err != nil {
		t.Fatalf("fresh data directory, no secrets: %v", err)
	}
	if m1.KeyID() == m2.KeyID() {
		t.Fatal("same key id")
	}
	if _, err := m2.Create(ctx, keys.Request{ProjectID: "p"}); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Open(ctx, st, t.TempDir(), keys.Options{Host: "h1"}); !errors.Is(err, keys.ErrKEK) {
		t.Fatalf("fresh data directory with a secret stored: %v", err)
	}
}

func TestRequestCheck(t *testing.T) {
	tests := []struct {
		req  keys.Request
		want string
	}{
		{keys.Request{}, "project_id: required"},
		{keys.Request{ProjectID: "bad project"}, `project_id "bad project"`},
		{keys.Request{ProjectID: "p", Name: "a/b"}, `name "a/b"`},
		{keys.Request{ProjectID: "p", Payload: []byte{}}, "payload: empty"},
		{keys.Request{ProjectID: "p", Payload: make([]byte, keys.MaxPayload+1)}, "more than"},
	}
	for _, tc := range tests {
		err := tc.req.Check()
		if !errors.Is(err, keys.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%+v) = %v; want %q", tc.req.Name, err, tc.want)
		}
	}
	if err := keys.CheckUUID("../x"); !errors.Is(err, keys.ErrInvalid) {
		t.Errorf("CheckUUID: %v", err)
	}
}

// TestSecretUUIDEitherCase: a secret's UUID is accepted in either case
// (RFC 4122: case-insensitive on input) and names the same secret: its
// metadata, its passphrase and its deletion.
func TestSecretUUIDEitherCase(t *testing.T) {
	ctx := context.Background()
	st := stores.Bolt(t)
	m := openManager(t, st, t.TempDir(), keys.Options{Host: "h1"})
	s, err := m.Create(ctx, keys.Request{ProjectID: "p", Payload: []byte("pass")})
	if err != nil {
		t.Fatal(err)
	}
	if s.UUID != strings.ToLower(s.UUID) {
		t.Fatalf("created %s: not lower case", s.UUID)
	}
	upper := strings.ToUpper(s.UUID)
	if err := keys.CheckUUID(upper); err != nil {
		t.Errorf("CheckUUID(%s): %v", upper, err)
	}
	if got, err := m.Get(ctx, upper); err != nil || got.UUID != s.UUID {
		t.Errorf("Get(%s) = %s, %v; want %s", upper, got.UUID, err, s.UUID)
	}
	if p, err := m.Passphrase(ctx, upper); err != nil || string(p) != "pass" {
		t.Errorf("Passphrase(%s) = %q, %v", upper, p, err)
	}
	if err := m.Delete(ctx, upper); err != nil {
		t.Errorf("Delete(%s): %v", upper, err)
	}
	if _, err := m.Get(ctx, s.UUID); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("Get after Delete(%s): %v, want ErrNotFound", upper, err)
	}
}
