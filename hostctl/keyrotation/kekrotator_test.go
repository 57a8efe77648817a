package keyrotation_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/vmeta/vmeta/hostctl/keyrotation"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

// TestKEKRotatorWithEngine: the Engine, with the real KEK procedure on
// each real store, rotates the key-encryption key when the policy asks
// for a generation; every secret still reads, wrapped under it.
func TestKEKRotatorWithEngine(t *testing.T) {
	for name, st := range stores.Both(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			km, err := keys.Open(ctx, st, t.TempDir(), keys.Options{Host: "h1", RotateBatch: 8})
			if err != nil {
				t.Fatal(err)
			}
			pass := map[string][]byte{}
			for range 30 {
				s, err := km.Create(ctx, keys.Request{ProjectID: "p"})
				if err != nil {
					t.Fatal(err)
				}
				if pass[s.UUID], err = km.Passphrase(ctx, s.UUID); err != nil {
					t.Fatal(err)
				}
			}
			e := keyrotation.New(st, keyrotation.Options{Host: "h1", Version: "v1.0.0"})
			e.Register(keyrotation.KEK, keyrotation.NewKEKRotator(km))
			kek := keyrotation.Subject{Class: keyrotation.KEK}
			if !km.KEK().Created {
				t.Fatal("KEK() does not say Open created the key")
			}
			if err := e.MarkCreated(ctx, kek); err != nil {
				t.Fatal(err)
			}
			if _, err := e.SetPolicy(ctx, kek, keyrotation.Policy{KeyRotationPolicy: keyrotation.KeyGeneration, KeyGeneration: 3}); err != nil {
				t.Fatal(err)
			}
			if err := e.Run(ctx); err != nil {
				t.Fatalf("Run: %v", err)
			}
			status, err := e.Status(ctx, kek)
			if err != nil || status.KeyGeneration != 3 || status.Target != 0 || status.Error != "" {
				t.Fatalf("status after Run = %+v, %v; want generation 3, done", status, err)
			}
			if k := km.KEK(); k.Current != 3 || len(k.Generations) != 1 {
				t.Fatalf("key file after Run: %+v; want generation 3 alone", k)
			}
			for id, want := range pass {
				got, err := km.Passphrase(ctx, id)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("secret %s after the rotation: %v", id, err)
				}
				if s, _ := km.Get(ctx, id); s.Generation != 3 {
					t.Fatalf("secret %s at generation %d, want 3", id, s.Generation)
				}
			}
			// The procedure is for the KEK class alone.
			_, err = keyrotation.NewKEKRotator(km).Rotate(ctx, keyrotation.Subject{Class: keyrotation.Token}, 4, 0, nil)
			if !errors.Is(err, keyrotation.ErrInvalid) {
				t.Fatalf("Rotate(token) = %v; want ErrInvalid", err)
			}
		})
	}
}
