package keys

// Pending passphrases: the new passphrase of a disk passphrase rotation
// in progress (hostctl/controller's disk rotation). It is persisted,
// wrapped, in the secret's own record before it is added to a LUKS key
// slot, so a crash at any later step leaves both the current and the new
// passphrase readable; once the new one is proven to open the disk,
// Promote makes it current in one record write.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/vmeta/vmeta/internal/store"
)

// ErrNoPending: the secret has no pending passphrase.
var ErrNoPending = errors.New("no pending passphrase")

// update applies fn to the secret's record and writes it back under
// compare-and-swap, retrying when another writer (a KEK rewrap) got in
// between (store.RetryConflicts). fn returns false when there is nothing
// to write.
func (m *Manager) update(ctx context.Context, id string, fn func(*secretRecord) (bool, error)) error {
	return store.RetryConflicts(ctx, "secret "+id, func() error {
		sr, err := m.load(ctx, id)
		if err != nil {
			return store.Final(err)
		}
		write, err := fn(&sr)
		if err != nil || !write {
			return store.Final(err)
		}
		val, err := json.Marshal(sr)
		if err != nil {
			return err
		}
		_, err = m.st.PutRecord(ctx, secretPrefix+id, val, sr.Version)
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("secret %s: %w", id, err)
		}
		return err
	})
}

// SetPending gives the secret a new pending passphrase (PassphraseBytes
// from crypto/rand, hex-encoded, stored wrapped) and returns it; when one
// is pending already it returns that one (a retried rotation does not
// mint a second passphrase). The caller clears it when done.
func (m *Manager) SetPending(ctx context.Context, id string) ([]byte, error) {
	raw := make([]byte, PassphraseBytes)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("generate passphrase: %w", err)
	}
	pass := []byte(hex.EncodeToString(raw))
	clear(raw)
	var out []byte
	minted := false
	err := m.update(ctx, id, func(sr *secretRecord) (bool, error) {
		if sr.Pending != nil {
			p, err := m.unwrap(*sr.Pending, PendingID(id))
			out = p
			return false, err
		}
		w, err := m.wrap(pass, PendingID(id))
		if err != nil {
			return false, err
		}
		sr.Pending = &w
		out, minted = pass, true
		return true, nil
	})
	if err != nil {
		clear(pass)
		clear(out)
		return nil, fmt.Errorf("set the pending passphrase of secret %s: %w", id, err)
	}
	if !minted {
		clear(pass)
	}
	return out, nil
}

// Pending returns the secret's pending passphrase, unwrapped, or
// ErrNoPending. The caller clears it when done.
func (m *Manager) Pending(ctx context.Context, id string) ([]byte, error) {
	sr, err := m.load(ctx, id)
	if err != nil {
		return nil, err
	}
	if sr.Pending == nil {
		return nil, fmt.Errorf("secret %s: %w", id, ErrNoPending)
	}
	return m.unwrap(*sr.Pending, PendingID(id))
}

// HasPending reports whether the secret has a pending passphrase.
func (m *Manager) HasPending(ctx context.Context, id string) (bool, error) {
	sr, err := m.load(ctx, id)
	if err != nil {
		return false, err
	}
	return sr.Pending != nil, nil
}

// Promote makes the pending passphrase the secret's passphrase, in one
// record write (the passphrase wrapped anew under the secret's own id,
// the pending one dropped). No pending passphrase is ErrNoPending (a
// retried Promote after one that succeeded).
func (m *Manager) Promote(ctx context.Context, id string) error {
	err := m.update(ctx, id, func(sr *secretRecord) (bool, error) {
		if sr.Pending == nil {
			return false, ErrNoPending
		}
		p, err := m.unwrap(*sr.Pending, PendingID(id))
		if err != nil {
			return false, err
		}
		defer clear(p)
		w, err := m.wrap(p, id)
		if err != nil {
			return false, err
		}
		sr.Wrapped, sr.Pending = w, nil
		sr.KeyID, sr.Generation = w.KeyID, w.Generation
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("promote the pending passphrase of secret %s: %w", id, err)
	}
	return nil
}

// DropPending forgets the secret's pending passphrase (none: no error).
func (m *Manager) DropPending(ctx context.Context, id string) error {
	err := m.update(ctx, id, func(sr *secretRecord) (bool, error) {
		if sr.Pending == nil {
			return false, nil
		}
		sr.Pending = nil
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("drop the pending passphrase of secret %s: %w", id, err)
	}
	return nil
}

// PendingSecrets lists the secrets that have a pending passphrase (an
// interrupted rotation, for start-up recovery), sorted by UUID.
func (m *Manager) PendingSecrets(ctx context.Context) ([]Secret, error) {
	recs, err := m.st.Records(ctx, secretPrefix)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	var out []Secret
	for _, rec := range recs {
		var sr secretRecord
		if err := json.Unmarshal(rec.Value, &sr); err != nil {
			return nil, fmt.Errorf("secret record %s: %w", rec.Key, err)
		}
		if sr.Pending != nil {
			sr.Version = rec.Version
			out = append(out, sr.Secret)
		}
	}
	return out, nil
}
