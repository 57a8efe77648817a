package keys

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/vmeta/vmeta/internal/store"
)

// SetPendingForTest stores plain as the pending passphrase of secret id
// (what a disk passphrase rotation does before it adds a LUKS key slot),
// so KEK rotation tests have pending values to rewrap.
func (m *Manager) SetPendingForTest(ctx context.Context, id string, plain []byte) error {
	return m.sealing(func() error {
		sr, err := m.load(ctx, id)
		if err != nil {
			return err
		}
		w, err := m.wrap(plain, PendingID(id))
		if err != nil {
			return err
		}
		sr.Pending = &w
		val, err := json.Marshal(sr)
		if err != nil {
			return err
		}
		_, err = m.st.PutRecord(ctx, secretPrefix+id, val, sr.Version)
		return err
	})
}

// PendingForTest returns secret id's pending passphrase, unwrapped.
func (m *Manager) PendingForTest(ctx context.Context, id string) ([]byte, error) {
	sr, err := m.load(ctx, id)
	if err != nil {
		return nil, err
	}
	if sr.Pending == nil {
		return nil, fmt.Errorf("secret %s has no pending passphrase", id)
	}
	return m.unwrap(*sr.Pending, PendingID(id))
}

// WrappedGenerationsForTest returns the generations of secret id's
// wrapped value and pending passphrase (0: none).
func (m *Manager) WrappedGenerationsForTest(ctx context.Context, id string) (wrapped, pending int64, err error) {
	sr, err := m.load(ctx, id)
	if err != nil {
		return 0, 0, err
	}
	if sr.Pending != nil {
		pending = sr.Pending.Generation
	}
	return sr.Wrapped.Generation, pending, nil
}

// SeedForBench stores n generated secrets wrapped under the current
// generation, in batches (Create would take one store write each).
func (m *Manager) SeedForBench(ctx context.Context, n int) error {
	for n > 0 {
		k := min(n, store.MaxRecordWrites)
		writes := make([]store.RecordWrite, 0, k)
		err := m.sealing(func() error {
			for range k {
				s := Secret{UUID: NewUUID(), ProjectID: "bench", Type: "passphrase", Created: m.now().UTC(), KeyID: m.keyID}
				w, err := m.wrap([]byte(NewUUID()+NewUUID()), s.UUID)
				if err != nil {
					return err
				}
				s.Generation = w.Generation
				val, err := json.Marshal(secretRecord{Secret: s, Wrapped: w})
				if err != nil {
					return err
				}
				writes = append(writes, store.RecordWrite{Key: secretPrefix + s.UUID, Value: val})
			}
			res, err := store.PutRecords(ctx, m.st, writes)
			if err != nil {
				return err
			}
			for _, r := range res {
				if r.Err != nil {
					return r.Err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// RewrapOneForBench rewraps one stored secret record's value in memory
// (decode, unwrap, wrap under the current generation, encode): the CPU
// cost of a rotation per secret, without the store.
func (m *Manager) RewrapOneForBench(key string, version int64, value []byte) ([]byte, error) {
	r := m.ring.Load()
	// A ring one generation ahead (its key a copy of the current one), so
	// the record is always below current and rewrapped.
	next := &keyring{cur: r.cur + 1, keys: maps.Clone(r.keys)}
	next.keys[next.cur] = r.keys[r.cur]
	return m.rewrapRecord(next, stale{key: key, version: version, value: value})
}

// AEADRewrapForBench returns a function that unwraps and wraps again,
// under the current generation, the wrapped value of a stored secret
// record: AES-256-GCM open and seal with their additional data, nothing
// else (the record is decoded once, here).
func (m *Manager) AEADRewrapForBench(value []byte) (func() error, error) {
	var sr secretRecord
	if err := json.Unmarshal(value, &sr); err != nil {
		return nil, err
	}
	r := m.ring.Load()
	return func() error {
		p, err := m.unwrapWith(r, sr.Wrapped, sr.UUID)
		if err != nil {
			return err
		}
		defer clear(p)
		_, err = m.wrapWith(r, p, sr.UUID)
		return err
	}, nil
}
