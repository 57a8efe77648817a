package keys

// Secrets that follow their instance to another host (issue 24 item 4).
//
// A secret's record holds one wrapped value, wrapped by the key of the
// host whose instance owns it: no other host's key opens it. When the
// instance moves, the source unwraps each of its secrets and sends the
// passphrase to the destination over the authenticated host-to-host
// channel (hostctl/migrate); the destination's manager takes it with
// MoveIn: it keeps the source's wrapped value, as it was (ciphertext the
// destination cannot open), in a record of its own under
// "keys/moved/<uuid>", and then rewraps the secret under its own key in
// one compare-and-swap of the secret's record. From then on the
// destination opens the secret and the source does not; the source's
// wrap is only kept for a revert. A confirm drops it (ForgetMoved, run
// by the source: its copy is gone); a revert puts it back (MoveBack, run
// by the source, which proves it still opens it first): the
// destination's wrap is gone. Every step can be repeated after a crash:
// each one looks at what the records hold before it writes.
//
// The kept wrap is not rewrapped by a key rotation of the source host
// (RotateKEK rewraps the secret records only): a source that rotates and
// retires the generation while a move waits in verify cannot revert it;
// confirm or revert before rotating.

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/store"
)

// movedPrefix names the kept source wraps of moved secrets.
const movedPrefix = "keys/moved/"

// ErrMoving is wrapped by the errors of the move functions when a secret
// cannot move as it is (a passphrase rotation in progress) or its records
// disagree with the move.
var ErrMoving = errkind.New(errkind.Conflict, "secret move")

// movedRecord is a moved secret's source wrap, kept until the move ends.
type movedRecord struct {
	// Host is the source host (whose key wraps Wrapped).
	Host string `json:"host"`
	// Owner is the secret's owner before the move.
	Owner   *Owner              `json:"owner,omitempty"`
	Wrapped store.WrappedSecret `json:"wrapped"`
}

// MoveIn makes the secret id this host's: pass is its passphrase, which
// the source host sent (the caller clears it). The source's wrapped value
// is kept (for MoveBack) before the secret's record is rewrapped under
// this manager's key and its owner's host set to this host. A secret this
// manager already wraps is checked to hold pass and left as it is.
func (m *Manager) MoveIn(ctx context.Context, id string, pass []byte) error {
	id, err := secretID(id)
	if err != nil {
		return err
	}
	return store.RetryConflicts(ctx, "move secret "+id+" in", func() error {
		sr, err := m.load(ctx, id)
		if err != nil {
			return store.Final(err)
		}
		if sr.Wrapped.KeyID == m.keyID {
			got, err := m.unwrap(sr.Wrapped, id)
			if err != nil {
				return store.Final(err)
			}
			defer clear(got)
			if subtle.ConstantTimeCompare(got, pass) != 1 {
				return store.Final(fmt.Errorf("%w: secret %s is wrapped by this host's key already, with another passphrase than the one sent", ErrMoving, id))
			}
			return nil
		}
		if sr.Pending != nil {
			return store.Final(fmt.Errorf("%w: secret %s has a passphrase rotation in progress; it moves once the rotation has finished", ErrMoving, id))
		}
		from := ""
		if sr.Owner != nil {
			from = sr.Owner.Host
		}
		keep, err := json.Marshal(movedRecord{Host: from, Owner: sr.Owner, Wrapped: sr.Wrapped})
		if err != nil {
			return store.Final(err)
		}
		if _, err := store.Update(ctx, m.st, movedPrefix+id, func(store.Record, bool) ([]byte, error) { return keep, nil }); err != nil {
			return store.Final(fmt.Errorf("keep the source's wrap of secret %s: %w", id, err))
		}
		return m.sealing(func() error {
			w, err := m.wrap(pass, id)
			if err != nil {
				return store.Final(err)
			}
			next := sr
			next.Wrapped, next.KeyID, next.Generation = w, m.keyID, w.Generation
			if sr.Owner != nil {
				o := *sr.Owner
				o.Host = m.host
				next.Owner = &o
			}
			val, err := json.Marshal(next)
			if err != nil {
				return store.Final(err)
			}
			_, err = m.st.PutRecord(ctx, secretPrefix+id, val, sr.Version) // a conflict: read again
			return err
		})
	})
}

// PassphraseForMove is the passphrase of secret id as the source of a
// move sends it: from its record while this manager wraps it, from the
// kept wrap once a MoveIn rewrapped it for the destination (a move
// resumed after that step sends it again).
func (m *Manager) PassphraseForMove(ctx context.Context, id string) ([]byte, error) {
	id, err := secretID(id)
	if err != nil {
		return nil, err
	}
	sr, err := m.load(ctx, id)
	if err != nil {
		return nil, err
	}
	if sr.Wrapped.KeyID == m.keyID {
		return m.Passphrase(ctx, id)
	}
	mv, _, err := m.moved(ctx, id)
	if err != nil {
		return nil, err
	}
	return m.unwrap(mv.Wrapped, id)
}

// MoveBack ends a reverted move of secret id on its source host: the
// kept wrap, which this manager must open, becomes the secret's value
// again (with its owner as before), and the kept record goes. A secret
// this manager wraps with no kept wrap has moved back already.
func (m *Manager) MoveBack(ctx context.Context, id string) error {
	id, err := secretID(id)
	if err != nil {
		return err
	}
	return store.RetryConflicts(ctx, "move secret "+id+" back", func() error {
		sr, err := m.load(ctx, id)
		if err != nil {
			return store.Final(err)
		}
		mv, ver, err := m.moved(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound) && sr.Wrapped.KeyID == m.keyID:
			return nil // moved back already
		case err != nil:
			return store.Final(err)
		}
		if sr.Wrapped.KeyID != m.keyID {
			p, err := m.unwrap(mv.Wrapped, id)
			if err != nil {
				return store.Final(fmt.Errorf("%w: the kept wrap of secret %s does not open with this host's key: %w", ErrMoving, id, err))
			}
			clear(p)
			next := sr
			next.Wrapped, next.KeyID, next.Generation, next.Owner = mv.Wrapped, mv.Wrapped.KeyID, mv.Wrapped.Generation, mv.Owner
			val, err := json.Marshal(next)
			if err != nil {
				return store.Final(err)
			}
			if _, err := m.st.PutRecord(ctx, secretPrefix+id, val, sr.Version); err != nil {
				return err
			}
		}
		if err := m.st.DeleteRecord(ctx, movedPrefix+id, ver); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	})
}

// ForgetMoved ends a confirmed move of secret id on its source host: the
// kept wrap goes (the destination's is the secret's value). Nothing kept
// is no error.
func (m *Manager) ForgetMoved(ctx context.Context, id string) error {
	id, err := secretID(id)
	if err != nil {
		return err
	}
	if err := m.st.DeleteRecord(ctx, movedPrefix+id, -1); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("forget the kept wrap of secret %s: %w", id, err)
	}
	return nil
}

// WrappedHere reports whether this manager's key wraps secret id's
// record (the host that can open it).
func (m *Manager) WrappedHere(ctx context.Context, id string) (bool, error) {
	sr, err := m.load(ctx, id)
	if err != nil {
		return false, err
	}
	return sr.Wrapped.KeyID == m.keyID, nil
}

// moved reads the kept wrap of secret id and its record's version.
func (m *Manager) moved(ctx context.Context, id string) (movedRecord, int64, error) {
	rec, err := m.st.Record(ctx, movedPrefix+id)
	if err != nil {
		return movedRecord{}, 0, fmt.Errorf("kept wrap of secret %s: %w", id, err)
	}
	var mv movedRecord
	if err := json.Unmarshal(rec.Value, &mv); err != nil {
		return movedRecord{}, 0, fmt.Errorf("kept wrap of secret %s: decode: %w", id, err)
	}
	return mv, rec.Version, nil
}
