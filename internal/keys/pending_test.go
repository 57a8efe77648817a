package keys_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/vmeta/vmeta/internal/keys"
)

// TestPending, on both real stores: SetPending mints one pending
// passphrase and returns the same one when called again; the current one
// is unchanged until Promote, which makes the pending one current in one
// write and leaves none pending; a second Promote is ErrNoPending;
// DropPending forgets one. Neither passphrase is in the store in plain,
// and a pending value copied onto the current field does not unwrap.
func TestPending(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			st, raw := be.open(t)
			m := openManager(t, st, t.TempDir(), keys.Options{Host: "h1"})
			s, err := m.Create(ctx, keys.Request{ProjectID: "p1", Owner: &keys.Owner{Host: "h1", InstanceName: "i", InstanceUUID: "u", Disk: "vda"}})
			if err != nil {
				t.Fatal(err)
			}
			cur, _ := m.Passphrase(ctx, s.UUID)
			if _, err := m.Pending(ctx, s.UUID); !errors.Is(err, keys.ErrNoPending) {
				t.Fatalf("Pending before SetPending = %v", err)
			}
			if err := m.Promote(ctx, s.UUID); !errors.Is(err, keys.ErrNoPending) {
				t.Fatalf("Promote without pending = %v", err)
			}
			p1, err := m.SetPending(ctx, s.UUID)
			if err != nil {
				t.Fatal(err)
			}
			p2, err := m.SetPending(ctx, s.UUID)
			if err != nil || !bytes.Equal(p1, p2) || len(p1) != 2*keys.PassphraseBytes {
				t.Fatalf("second SetPending = %q, %v; want the first %q", p2, err, p1)
			}
			if bytes.Equal(p1, cur) {
				t.Fatal("pending equals current")
			}
			if got, _ := m.Passphrase(ctx, s.UUID); !bytes.Equal(got, cur) {
				t.Fatal("SetPending changed the current passphrase")
			}
			if got, err := m.Pending(ctx, s.UUID); err != nil || !bytes.Equal(got, p1) {
				t.Fatalf("Pending = %q, %v", got, err)
			}
			if ps, err := m.PendingSecrets(ctx); err != nil || len(ps) != 1 || ps[0].UUID != s.UUID {
				t.Fatalf("PendingSecrets = %+v, %v", ps, err)
			}
			for _, b := range raw(t) {
				if bytes.Contains(b, p1) || bytes.Contains(b, cur) {
					t.Fatal("a passphrase is in the store in plain")
				}
			}
			// The pending ciphertext names the secret as PendingID: moved
			// onto the current field, it does not unwrap.
			rec, _ := st.Record(ctx, "keys/secret/"+s.UUID)
			var m1 map[string]json.RawMessage
			json.Unmarshal(rec.Value, &m1)
			m1["wrapped"] = m1["pending"]
			swapped, _ := json.Marshal(m1)
			if _, err := st.PutRecord(ctx, rec.Key, swapped, rec.Version); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Passphrase(ctx, s.UUID); err == nil {
				t.Fatal("a pending value moved onto the current one unwraps")
			}
			swappedRec, _ := st.Record(ctx, rec.Key)
			if _, err := st.PutRecord(ctx, rec.Key, rec.Value, swappedRec.Version); err != nil {
				t.Fatal(err)
			}

			if err := m.Promote(ctx, s.UUID); err != nil {
				t.Fatal(err)
			}
			if got, _ := m.Passphrase(ctx, s.UUID); !bytes.Equal(got, p1) {
				t.Fatal("after Promote the passphrase is not the pending one")
			}
			if ok, _ := m.HasPending(ctx, s.UUID); ok {
				t.Fatal("still pending after Promote")
			}
			if err := m.Promote(ctx, s.UUID); !errors.Is(err, keys.ErrNoPending) {
				t.Fatalf("second Promote = %v", err)
			}
			if _, err := m.SetPending(ctx, s.UUID); err != nil {
				t.Fatal(err)
			}
			if err := m.DropPending(ctx, s.UUID); err != nil {
				t.Fatal(err)
			}
			if err := m.DropPending(ctx, s.UUID); err != nil {
				t.Fatal(err)
			}
			if ok, _ := m.HasPending(ctx, s.UUID); ok {
				t.Fatal("pending after DropPending")
			}
			if got, _ := m.Passphrase(ctx, s.UUID); !bytes.Equal(got, p1) {
				t.Fatal("DropPending changed the current passphrase")
			}
			if _, err := m.SetPending(ctx, "7d1f2ad4-0000-4000-8000-000000000000"); !errors.Is(err, keys.ErrNotFound) {
				t.Fatalf("SetPending of a missing secret = %v", err)
			}
		})
	}
}

// TestPendingConcurrentSet: of many SetPending calls at once, every one
// returns the same passphrase (compare-and-swap, one winner).
func TestPendingConcurrentSet(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			st, _ := be.open(t)
			m := openManager(t, st, t.TempDir(), keys.Options{Host: "h1"})
			s, err := m.Create(ctx, keys.Request{ProjectID: "p1"})
			if err != nil {
				t.Fatal(err)
			}
			const n = 8
			got := make(chan []byte, n)
			errs := make(chan error, n)
			for range n {
				go func() {
					p, err := m.SetPending(ctx, s.UUID)
					got <- p
					errs <- err
				}()
			}
			var first []byte
			for range n {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
				p := <-got
				if first == nil {
					first = p
				} else if !bytes.Equal(p, first) {
					t.Fatal("two concurrent SetPending calls minted different passphrases")
				}
			}
		})
	}
}
