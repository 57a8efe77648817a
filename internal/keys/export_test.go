package keys

import (
	"context"
	"encoding/json"
	"fmt"
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
