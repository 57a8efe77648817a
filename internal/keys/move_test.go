package keys_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/vmeta/vmeta/internal/keys"
)

// TestSecretFollowsInstance is issue 24 item 4 on both stores: a secret
// of host a's instance, moved to host b (MoveIn with the passphrase a
// sent), opens with b's key and no longer with a's; a keeps its wrap
// only for a revert. Revert (MoveBack) gives it back to a; confirm
// (ForgetMoved) leaves it b's alone. Every step repeated is a no-op, and
// the plaintext is never in the store.
func TestSecretFollowsInstance(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			st, dump := be.open(t)
			a := openManager(t, st, t.TempDir(), keys.Options{Host: "a"})
			b := openManager(t, st, t.TempDir(), keys.Options{Host: "b"})
			pass := []byte("correct horse battery staple, moved")
			s, err := a.Create(ctx, keys.Request{Name: "disk", ProjectID: "p1", Payload: bytes.Clone(pass),
				Owner: &keys.Owner{Host: "a", InstanceUUID: "11111111-2222-4333-8444-555555555555", InstanceName: "vm", Disk: "root"}})
			if err != nil {
				t.Fatal(err)
			}
			opens := func(m *keys.Manager, who string, want bool) {
				t.Helper()
				got, err := m.Passphrase(ctx, s.UUID)
				switch {
				case want && (err != nil || !bytes.Equal(got, pass)):
					t.Fatalf("%s: passphrase = %q, %v; want it to open", who, got, err)
				case !want && !errors.Is(err, keys.ErrKEK):
					t.Fatalf("%s: passphrase err = %v; want ErrKEK (not its key)", who, err)
				}
			}
			owner := func(want string) {
				t.Helper()
				g, err := a.Get(ctx, s.UUID)
				if err != nil || g.Owner == nil || g.Owner.Host != want {
					t.Fatalf("owner = %+v, %v; want host %s", g.Owner, err, want)
				}
			}

			// The move: a sends, b takes it in (twice: a retried step).
			for range 2 {
				sent, err := a.PassphraseForMove(ctx, s.UUID)
				if err != nil {
					t.Fatalf("PassphraseForMove: %v", err)
				}
				if err := b.MoveIn(ctx, s.UUID, sent); err != nil {
					t.Fatalf("MoveIn: %v", err)
				}
			}
			opens(b, "b", true)
			opens(a, "a", false)
			owner("b")
			if err := b.MoveIn(ctx, s.UUID, []byte("another one")); !errors.Is(err, keys.ErrMoving) {
				t.Fatalf("MoveIn of another passphrase: %v, want ErrMoving", err)
			}
			for _, raw := range dump(t) {
				if bytes.Contains(raw, pass) {
					t.Fatal("the plaintext passphrase is in the store")
				}
			}

			// Revert: a's wrap is the value again (twice: retried).
			for range 2 {
				if err := a.MoveBack(ctx, s.UUID); err != nil {
					t.Fatalf("MoveBack: %v", err)
				}
			}
			opens(a, "a", true)
			opens(b, "b", false)
			owner("a")
			if err := b.MoveBack(ctx, s.UUID); err == nil {
				t.Fatal("b moved back a secret it never wrapped")
			}

			// Move again and confirm: a's kept wrap goes.
			sent, err := a.PassphraseForMove(ctx, s.UUID)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.MoveIn(ctx, s.UUID, sent); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if err := a.ForgetMoved(ctx, s.UUID); err != nil {
					t.Fatalf("ForgetMoved: %v", err)
				}
			}
			opens(b, "b", true)
			if _, err := a.PassphraseForMove(ctx, s.UUID); !errors.Is(err, keys.ErrNotFound) {
				t.Fatalf("a's passphrase after confirm: %v, want ErrNotFound (its copy is gone)", err)
			}
			if err := a.MoveBack(ctx, s.UUID); !errors.Is(err, keys.ErrNotFound) {
				t.Fatalf("MoveBack after confirm: %v, want ErrNotFound", err)
			}
		})
	}
}
