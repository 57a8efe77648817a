package keys

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
)

// The key file must never lose a generation that a stored value still
// uses, whoever rotated. Two guards, besides the daemon's lock on its data
// directory (one process per key file):
//
//   - a manager re-reads the key file before it wraps a new value when
//     the file was replaced since it last read it (another process
//     rotated), so it wraps under the file's current generation, never
//     under one that may be retired;
//   - a rotation lists the secrets once more right before it retires
//     generations, and keeps every generation a stored value still uses
//     (the rotation then reports an error and the next call rewraps it).

// refresh makes the manager's key ring the key file's when the file was
// replaced since the manager last read it. Errors are left to the wrap
// and the next rotation: a manager keeps the ring it has.
func (m *Manager) refresh() {
	fi, err := os.Stat(m.path)
	if err != nil {
		return
	}
	m.fileMu.Lock()
	same := m.fileInfo != nil && os.SameFile(fi, m.fileInfo) && fi.ModTime().Equal(m.fileInfo.ModTime()) && fi.Size() == m.fileInfo.Size()
	m.fileMu.Unlock()
	if same {
		return
	}
	kf, err := readKEK(m.path)
	if err != nil || kf.KeyID != m.keyID {
		return
	}
	if m.useRing(kf) == nil {
		m.noteFile(fi)
	}
}

// noteFile records the key file's identity as last read (fi from a Stat
// taken before the read: a later change is seen by the next refresh).
func (m *Manager) noteFile(fi os.FileInfo) {
	m.fileMu.Lock()
	m.fileInfo = fi
	m.fileMu.Unlock()
}

// statFile is os.Stat of the key file, nil on error.
func (m *Manager) statFile() os.FileInfo {
	fi, err := os.Stat(m.path)
	if err != nil {
		return nil
	}
	return fi
}

// stillUsed returns the generations among old that a stored value of
// this KEK still uses (secrets, pending passphrases, the check record),
// each with one secret that uses it, for the message.
func (m *Manager) stillUsed(ctx context.Context, old []int64) (map[int64]string, error) {
	used := map[int64]string{}
	note := func(keyID string, gen int64, id string) {
		if keyID == m.keyID && slices.Contains(old, gen) && used[gen] == "" {
			used[gen] = id
		}
	}
	recs, err := m.st.Records(ctx, secretPrefix)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	for _, r := range recs {
		var sr secretRecord
		if err := json.Unmarshal(r.Value, &sr); err != nil {
			return nil, fmt.Errorf("secret record %s: %w", r.Key, err)
		}
		id := strings.TrimPrefix(r.Key, secretPrefix)
		note(sr.Wrapped.KeyID, sr.Wrapped.Generation, "secret "+id)
		if sr.Pending != nil {
			note(sr.Pending.KeyID, sr.Pending.Generation, "the pending passphrase of secret "+id)
		}
	}
	if rec, err := m.st.Record(ctx, checkPrefix+m.host); err == nil {
		var cr checkRecord
		if json.Unmarshal(rec.Value, &cr) == nil {
			note(cr.Check.KeyID, cr.Check.Generation, "check record "+checkPrefix+m.host)
		}
	}
	return used, nil
}
