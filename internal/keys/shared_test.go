package keys_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store"
)

// TestKeyFileSharedByTwoManagers: two managers on one key file and one
// store (two daemons on one data directory, as issue 21 found on Redis).
// One rotates; a secret the other creates afterwards is wrapped under the
// file's current generation, never under the retired one, and every later
// rotation by either succeeds with every secret readable.
func TestKeyFileSharedByTwoManagers(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			st, _ := b.open(t)
			dir := t.TempDir()
			m1 := openManager(t, st, dir, keys.Options{Host: "h1"})
			m2 := openManager(t, st, dir, keys.Options{Host: "h1"})
			if _, err := m1.RotateKEK(ctx, 2, nil); err != nil {
				t.Fatal(err)
			}
			sec, err := m2.Create(ctx, keys.Request{ProjectID: "p"})
			if err != nil {
				t.Fatal(err)
			}
			if sec.Generation != 2 {
				t.Errorf("secret created by the other manager after the rotation: generation %d, want 2 (generation 1 is retired)", sec.Generation)
			}
			if _, err := m1.RotateKEK(ctx, 3, nil); err != nil {
				t.Fatalf("the next rotation: %v", err)
			}
			for _, m := range []*keys.Manager{m1, m2} {
				if _, err := m.Passphrase(ctx, sec.UUID); err != nil {
					t.Errorf("secret %s after the second rotation: %v", sec.UUID, err)
				}
			}
		})
	}
}

// injectingStore runs inject once, after the first listing of the secrets
// it serves.
type injectingStore struct {
	store.Store
	once   sync.Once
	inject func()
}

func (s *injectingStore) Records(ctx context.Context, prefix string) ([]store.Record, error) {
	recs, err := s.Store.Records(ctx, prefix)
	if strings.HasPrefix(prefix, "keys/secret/") {
		s.once.Do(s.inject)
	}
	return recs, err
}

// TestRotateKEKKeepsGenerationStillUsed: a secret record wrapped under the
// old generation lands after the rotation's last rewrap listing (another
// process, or a restore); the rotation keeps that generation in the key
// file and says so, the secret stays readable, and the next call rewraps
// it and retires the generation.
func TestRotateKEKKeepsGenerationStillUsed(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			raw, _ := b.open(t)
			dir := t.TempDir()
			m0 := openManager(t, raw, dir, keys.Options{Host: "h1"})
			sec, err := m0.Create(ctx, keys.Request{ProjectID: "p"})
			if err != nil {
				t.Fatal(err)
			}
			want, err := m0.Passphrase(ctx, sec.UUID)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := raw.Record(ctx, "keys/secret/"+sec.UUID)
			if err != nil {
				t.Fatal(err)
			}
			if err := raw.DeleteRecord(ctx, rec.Key, rec.Version); err != nil {
				t.Fatal(err)
			}
			st := &injectingStore{Store: raw, inject: func() {
				if _, err := raw.PutRecord(ctx, rec.Key, rec.Value, 0); err != nil {
					t.Error(err)
				}
			}}
			m := openManager(t, st, dir, keys.Options{Host: "h1"})
			_, err = m.RotateKEK(ctx, 2, nil)
			if err == nil || !strings.Contains(err.Error(), "kept generation 1") || !strings.Contains(err.Error(), sec.UUID) {
				t.Errorf("RotateKEK with a generation-1 secret written after its listing = %v; want an error keeping generation 1 for secret %s", err, sec.UUID)
			}
			if got, err := m.Passphrase(ctx, sec.UUID); err != nil || string(got) != string(want) {
				t.Fatalf("the secret after the rotation: %v", err)
			}
			res, err := m.RotateKEK(ctx, 2, nil)
			if err != nil || len(res.Retired) != 1 || res.Retired[0] != 1 {
				t.Fatalf("RotateKEK again = %+v, %v; want generation 1 retired", res, err)
			}
			if got, err := m.Passphrase(ctx, sec.UUID); err != nil || string(got) != string(want) {
				t.Fatalf("the secret after the second call: %v", err)
			}
		})
	}
}
