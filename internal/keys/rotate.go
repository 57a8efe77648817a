package keys

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/vmeta/vmeta/internal/atomicfile"
	"github.com/vmeta/vmeta/internal/crashpoint"
	"github.com/vmeta/vmeta/internal/store"
)

// KEK rotation
//
// RotateKEK(gen) brings every value wrapped by this host's KEK to
// generation gen, in three phases, each safe to interrupt at any point
// and finished by the next call for the same gen:
//
//  1. generation-written: when the file's current generation is below
//     gen, a new key (crypto/rand) is added to the key file as generation
//     gen and made current, in one atomic write (temporary file, fsync,
//     rename; mode 0600) before anything is rewrapped; every older
//     generation stays in the file. From then on every new secret is
//     wrapped under gen.
//  2. batch-rewrapped#N: every secret record whose wrapped value (or
//     pending passphrase) is of this KEK and an older generation is
//     unwrapped and wrapped again under gen, its record rewritten with a
//     compare-and-swap on its version, in batches of RotateBatch records
//     (store.PutRecords: one bolt transaction, one Redis pipeline). A
//     record changed meanwhile (a conflict) is read again and redone; one
//     deleted meanwhile is skipped. Then the host's check record, the
//     same way (check-rewrapped).
//  3. retired: once a listing finds no value of this KEK under an older
//     generation, those generations are deleted from the key file (atomic
//     write again).
//
// The cursor of phase 2 is the records themselves: a rewrapped record
// carries generation gen, so after a crash the next call lists the
// secrets and rewraps exactly those still below gen. A separate cursor
// record was rejected: it is one more write per batch (on a Redis Cluster
// in a slot of its own, so never atomic with the batch), and it could not
// spare the listing anyway, since secrets created or rewritten by other
// writers during the rotation must be found too. The listing is one
// store.Records call (a bolt cursor; a Redis SCAN and pipelined reads)
// filtered in memory without unwrapping anything; BenchmarkRewrap100k
// reports its share.
//
// Secrets wrapped by another host's KEK (same store, another key id) are
// neither read nor written.

// RotateProcedure names the KEK rotation's crash points
// (crashpoint.Name(RotateProcedure, step)).
const RotateProcedure = "kek-rotate"

// The steps of a KEK rotation; StepBatchRewrapped is reached once per
// batch (crash at the N-th with "batch-rewrapped#N").
const (
	StepGenerationWritten = "generation-written"
	StepBatchRewrapped    = "batch-rewrapped"
	StepCheckRewrapped    = "check-rewrapped"
	StepRetired           = "retired"
)

var _ = crashpoint.Declare(RotateProcedure, StepGenerationWritten, StepBatchRewrapped, StepCheckRewrapped, StepRetired)

// DefaultRotateBatch is how many secrets a KEK rotation rewraps per store
// write by default.
const DefaultRotateBatch = 512

// maxConflictRounds bounds how often a rotation re-reads records that other
// writers keep changing before it gives up (and is called again later):
// the one bound of every compare-and-swap loop.
const maxConflictRounds = store.MaxCASAttempts

// KEKInfo is the state of the KEK file.
type KEKInfo struct {
	KeyID string `json:"key_id"`
	// Current is the generation that wraps new values. Generations are
	// those of the keyrotation status: a KEK is created at 1 and a
	// rotation to generation g makes g current, so the file always tracks
	// the status generation.
	Current int64 `json:"current"`
	// Generations are every generation in the file, ascending (older ones
	// remain while a rotation is unfinished).
	Generations []int64 `json:"generations"`
	// Created: Open created the KEK (the first start of this host).
	Created bool `json:"created"`
}

// KEK returns the state of the KEK file.
func (m *Manager) KEK() KEKInfo {
	r := m.ring.Load()
	return KEKInfo{KeyID: m.keyID, Current: r.cur, Generations: slices.Sorted(maps.Keys(r.keys)), Created: m.created}
}

// RotateResult is what RotateKEK did.
type RotateResult struct {
	// Generation is the current generation after the call.
	Generation int64
	// NewKey: this call wrote the new generation (false when an earlier,
	// interrupted call had).
	NewKey bool
	// Rewrapped counts the values rewrapped by this call (secrets,
	// pending passphrases and the check record).
	Rewrapped int
	// Retired are the generations deleted from the key file.
	Retired []int64
}

// RotateKEK rotates this host's KEK to generation gen (see "KEK rotation"
// above): idempotent for a given gen — called again after a crash or an
// error at any step, it finishes the same rotation without minting
// another key; when the file is already at gen (or beyond) it only
// finishes rewrapping and retiring. progress, if not nil, is called with
// the secrets rewrapped so far and the total found to rewrap.
//
// Creates, reads and deletes of secrets may run concurrently.
func (m *Manager) RotateKEK(ctx context.Context, gen int64, progress func(done, total int)) (RotateResult, error) {
	if gen < 1 {
		return RotateResult{}, fmt.Errorf("%w: key generation %d: must be 1 or more", ErrInvalid, gen)
	}
	m.rotateMu.Lock()
	defer m.rotateMu.Unlock()
	var res RotateResult
	if m.current() < gen {
		if err := m.addGeneration(gen); err != nil {
			return res, err
		}
		res.NewKey = true
		crashpoint.Hit(crashpoint.Name(RotateProcedure, StepGenerationWritten))
	}
	res.Generation = m.current()

	n, err := m.rewrapAll(ctx, progress)
	res.Rewrapped += n
	if err != nil {
		return res, err
	}
	retired, err := m.retire(ctx)
	res.Retired = retired
	if err != nil {
		return res, err
	}
	if len(retired) > 0 {
		crashpoint.Hit(crashpoint.Name(RotateProcedure, StepRetired))
	}
	return res, nil
}

// addGeneration writes a new key as generation gen, current, into the
// key file (every other generation kept), then switches the manager to
// it once no write under the old generation is in flight.
func (m *Manager) addGeneration(gen int64) error {
	kf, err := readKEK(m.path)
	if err != nil {
		return fmt.Errorf("%w: rotate: read %s: %w", ErrKEK, m.path, err)
	}
	if kf.KeyID != m.keyID {
		return fmt.Errorf("%w: rotate: %s now holds key %s, not %s: it was replaced while hostctl ran", ErrKEK, m.path, kf.KeyID, m.keyID)
	}
	if kf.Current >= gen {
		// Another writer of the file? Only this process writes it; take
		// what is there.
		return m.useRing(kf)
	}
	key := make([]byte, keyLen)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("rotate: generate key-encryption key: %w", err)
	}
	kf.Keys[strconv.FormatInt(gen, 10)] = hex.EncodeToString(key)
	clear(key)
	kf.Current = gen
	if err := writeKEK(m.path, kf); err != nil {
		return fmt.Errorf("rotate: write generation %d: %w", gen, err)
	}
	fi := m.statFile()
	if err := m.useRing(kf); err != nil {
		return err
	}
	m.noteFile(fi)
	return nil
}

// useRing makes kf the manager's key ring, waiting for writes under the old
// one to finish (sealing).
func (m *Manager) useRing(kf *kekFile) error {
	r, err := kf.ring()
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrKEK, m.path, err)
	}
	m.sealMu.Lock()
	m.ring.Store(r)
	m.sealMu.Unlock()
	return nil
}

// stale is a record holding a value of this KEK below the current
// generation.
type stale struct {
	key     string
	version int64
	value   []byte
}

// rewrapAll rewraps every secret below the current generation, then the
// check record, listing again until a listing finds nothing left (a
// secret written by a writer that started before the switch, or a record
// changed under the rotation, is caught by the next listing).
//
// Progress counts the records handled: rewritten, or found deleted or
// already rewrapped by another writer when their write conflicted.
func (m *Manager) rewrapAll(ctx context.Context, progress func(done, total int)) (int, error) {
	done, total, rewrapped := 0, 0, 0
	for round := 0; ; round++ {
		todo, err := m.staleSecrets(ctx)
		if err != nil {
			return done, err
		}
		if len(todo) == 0 {
			break
		}
		if round >= maxConflictRounds {
			return done, fmt.Errorf("rotate key-encryption key: %d secrets still below generation %d after %d rounds (changed by other writers each time); try again", len(todo), m.current(), round)
		}
		total += len(todo)
		if progress != nil {
			progress(done, total)
		}
		handled := 0
		k, err := m.rewrapList(ctx, todo, func(batch, written int) {
			handled += batch
			rewrapped += written
			if progress != nil {
				progress(handled+done, total)
			}
			crashpoint.Hit(crashpoint.Name(RotateProcedure, StepBatchRewrapped))
		})
		done += handled
		if err != nil {
			return rewrapped + k, err
		}
	}
	n, err := m.rewrapCheck(ctx)
	return rewrapped + n, err
}

// staleSecrets lists the secret records with a value of this KEK below
// the current generation.
func (m *Manager) staleSecrets(ctx context.Context) ([]stale, error) {
	recs, err := m.st.Records(ctx, secretPrefix)
	if err != nil {
		return nil, fmt.Errorf("rotate key-encryption key: list secrets: %w", err)
	}
	cur := m.current()
	var out []stale
	for _, r := range recs {
		st, err := m.isStaleRecord(r.Value, cur)
		if err != nil {
			return nil, fmt.Errorf("rotate key-encryption key: secret record %s: %w", r.Key, err)
		}
		if st {
			out = append(out, stale{key: r.Key, version: r.Version, value: r.Value})
		}
	}
	return out, nil
}

// isStaleRecord reports whether a secret record holds a value of this KEK
// below generation cur (its wrapped value or its pending passphrase).
func (m *Manager) isStaleRecord(value []byte, cur int64) (bool, error) {
	var w struct {
		Wrapped store.WrappedSecret  `json:"wrapped"`
		Pending *store.WrappedSecret `json:"pending"`
	}
	if err := json.Unmarshal(value, &w); err != nil {
		return false, err
	}
	return m.isStale(w.Wrapped, cur) || w.Pending != nil && m.isStale(*w.Pending, cur), nil
}

// staleRecord is isStaleRecord at the current generation; a record that
// does not decode counts as stale (rewrapping it reports the error).
func (m *Manager) staleRecord(value []byte) bool {
	st, err := m.isStaleRecord(value, m.current())
	return st || err != nil
}

func (m *Manager) isStale(w store.WrappedSecret, cur int64) bool {
	return w.KeyID == m.keyID && w.Generation < cur
}

// preparedBatch is a batch of records rewrapped in memory, to be
// written.
type preparedBatch struct {
	todo   []stale
	writes []store.RecordWrite
	err    error
}

// rewrapList rewraps the records of todo in batches of m.batch, calling
// written after each batch is in the store with the batch's size and the
// count of records it wrote (fewer when some were deleted meanwhile). The
// next batch is rewrapped in memory (CPU) while the store writes the
// current one (I/O), so the two overlap. It returns the count written
// but not yet reported when it fails.
func (m *Manager) rewrapList(ctx context.Context, todo []stale, written func(batch, wrote int)) (int, error) {
	r := m.ring.Load()
	batches := make(chan preparedBatch, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(batches)
		for len(todo) > 0 {
			n := min(m.batch, len(todo))
			writes, err := m.prepare(r, todo[:n])
			select {
			case batches <- preparedBatch{todo: todo[:n], writes: writes, err: err}:
			case <-stop:
				return
			}
			if err != nil {
				return
			}
			todo = todo[n:]
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for b := range batches {
		if b.err != nil {
			return 0, b.err
		}
		k, err := m.writeBatch(ctx, b.writes)
		if err != nil {
			return k, err
		}
		written(len(b.writes), k)
	}
	return 0, nil
}

// prepare rewraps the records of todo in memory under r.cur, as writes
// that expect each record's version.
func (m *Manager) prepare(r *keyring, todo []stale) ([]store.RecordWrite, error) {
	writes := make([]store.RecordWrite, 0, len(todo))
	for _, s := range todo {
		val, err := m.rewrapRecord(r, s)
		if err != nil {
			return nil, err
		}
		writes = append(writes, store.RecordWrite{Key: s.key, Value: val, ExpectVersion: s.version})
	}
	return writes, nil
}

// writeBatch writes rewrapped records in one batch; a record changed
// since it was read is read again, rewrapped and written again, one
// deleted meanwhile is skipped. It returns how many records it wrote.
func (m *Manager) writeBatch(ctx context.Context, writes []store.RecordWrite) (int, error) {
	done := 0
	for round := 0; len(writes) > 0; round++ {
		if round >= maxConflictRounds {
			return done, fmt.Errorf("rotate key-encryption key: secret %s changed by another writer %d times in a row; try again", writes[0].Key, round)
		}
		res, err := store.PutRecords(ctx, m.st, writes)
		if err != nil {
			return done, fmt.Errorf("rotate key-encryption key: write %d rewrapped secrets: %w", len(writes), err)
		}
		var again []stale
		for i, rr := range res {
			switch {
			case rr.Err == nil:
				done++
			case errors.Is(rr.Err, store.ErrConflict):
				rec, err := m.st.Record(ctx, writes[i].Key)
				if errors.Is(err, store.ErrNotFound) {
					continue // deleted meanwhile: nothing to rewrap
				}
				if err != nil {
					return done, fmt.Errorf("rotate key-encryption key: re-read %s: %w", writes[i].Key, err)
				}
				if !m.staleRecord(rec.Value) {
					continue // rewritten meanwhile under the current generation
				}
				again = append(again, stale{key: rec.Key, version: rec.Version, value: rec.Value})
			default:
				return done, fmt.Errorf("rotate key-encryption key: %w", rr.Err)
			}
		}
		if writes, err = m.prepare(m.ring.Load(), again); err != nil {
			return done, err
		}
	}
	return done, nil
}

// rewrapRecord returns a secret record's value with its wrapped value and
// pending passphrase (those of this KEK below r.cur) wrapped again under
// r.cur. The plaintext lives only for the call.
func (m *Manager) rewrapRecord(r *keyring, s stale) ([]byte, error) {
	var sr secretRecord
	if err := json.Unmarshal(s.value, &sr); err != nil {
		return nil, fmt.Errorf("rotate key-encryption key: secret record %s: %w", s.key, err)
	}
	id := sr.UUID
	if id == "" {
		id = s.key[len(secretPrefix):]
	}
	if m.isStale(sr.Wrapped, r.cur) {
		w, err := m.rewrap(r, sr.Wrapped, id)
		if err != nil {
			return nil, err
		}
		sr.Wrapped = w
		sr.Generation = w.Generation
		sr.KeyID = w.KeyID
	}
	if sr.Pending != nil && m.isStale(*sr.Pending, r.cur) {
		w, err := m.rewrap(r, *sr.Pending, PendingID(id))
		if err != nil {
			return nil, err
		}
		sr.Pending = &w
	}
	return json.Marshal(sr)
}

func (m *Manager) rewrap(r *keyring, w store.WrappedSecret, id string) (store.WrappedSecret, error) {
	plain, err := m.unwrapWith(r, w, id)
	if err != nil {
		return store.WrappedSecret{}, fmt.Errorf("rotate key-encryption key: %w (the rotation stops here, keeping every generation, until the record is repaired or deleted)", err)
	}
	defer clear(plain)
	return m.wrapWith(r, plain, id)
}

// rewrapCheck rewraps the host's check record when it is below the
// current generation.
func (m *Manager) rewrapCheck(ctx context.Context) (int, error) {
	key := checkPrefix + m.host
	wrote := false
	_, err := store.Update(ctx, m.st, key, func(rec store.Record, exists bool) ([]byte, error) {
		wrote = false
		if !exists {
			return nil, fmt.Errorf("rotate key-encryption key: read check record %s: %w", key, store.ErrNotFound)
		}
		var cr checkRecord
		if err := json.Unmarshal(rec.Value, &cr); err != nil {
			return nil, fmt.Errorf("rotate key-encryption key: check record %s: %w", key, err)
		}
		r := m.ring.Load()
		if !m.isStale(cr.Check, r.cur) {
			return nil, nil
		}
		var err error
		if cr.Check, err = m.rewrap(r, cr.Check, "check:"+m.host); err != nil {
			return nil, err
		}
		wrote = true
		return json.Marshal(cr)
	})
	switch {
	case err != nil && !wrote:
		return 0, err
	case err != nil:
		return 0, fmt.Errorf("rotate key-encryption key: write check record %s: %w", key, err)
	case !wrote:
		return 0, nil
	}
	crashpoint.Hit(crashpoint.Name(RotateProcedure, StepCheckRewrapped))
	return 1, nil
}

// retire deletes from the key file the generations below the current one
// (called when nothing uses them any more).
//
// Right before it writes the file it lists the stored values once more
// (refresh.go): a generation one of them still uses (written by another
// process that shares the key file, or restored from a backup) is kept,
// and the rotation reports it; the next call rewraps that value.
func (m *Manager) retire(ctx context.Context) ([]int64, error) {
	kf, err := readKEK(m.path)
	if err != nil {
		return nil, fmt.Errorf("%w: rotate: read %s: %w", ErrKEK, m.path, err)
	}
	var old []int64
	for g := range kf.Keys {
		if gen, _ := strconv.ParseInt(g, 10, 64); gen < kf.Current {
			old = append(old, gen)
		}
	}
	if len(old) == 0 {
		return nil, nil
	}
	slices.Sort(old)
	used, err := m.stillUsed(ctx, old)
	if err != nil {
		return nil, fmt.Errorf("rotate key-encryption key: before retiring generations %v: %w", old, err)
	}
	var retired []int64
	for _, gen := range old {
		if used[gen] == "" {
			retired = append(retired, gen)
			delete(kf.Keys, strconv.FormatInt(gen, 10))
		}
	}
	var keptErr error
	if len(retired) < len(old) {
		var what []string
		for _, gen := range old {
			if used[gen] != "" {
				what = append(what, fmt.Sprintf("generation %d (still used by %s)", gen, used[gen]))
			}
		}
		keptErr = fmt.Errorf("rotate key-encryption key: kept %s: a value was written under it after the rotation's last listing (by another process sharing the key file?); rotate again to rewrap it", strings.Join(what, ", "))
	}
	if len(retired) == 0 {
		return nil, keptErr
	}
	if err := writeKEK(m.path, kf); err != nil {
		return nil, fmt.Errorf("rotate: retire generations %v: %w", retired, err)
	}
	if err := m.useRing(kf); err != nil {
		return retired, err
	}
	m.noteFile(m.statFile())
	return retired, keptErr
}

// writeKEK replaces the key file atomically (0600).
func writeKEK(path string, kf *kekFile) error {
	b, err := json.MarshalIndent(kf, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(b, '\n'), 0o600)
}

// ring decodes the file's generations.
func (kf *kekFile) ring() (*keyring, error) {
	r := &keyring{cur: kf.Current, keys: make(map[int64][]byte, len(kf.Keys))}
	for g, k := range kf.Keys {
		gen, err := strconv.ParseInt(g, 10, 64)
		if err != nil || gen < 1 {
			return nil, fmt.Errorf("generation %q is not a positive number", g)
		}
		b, err := hex.DecodeString(k)
		if err != nil || len(b) != keyLen {
			return nil, fmt.Errorf("generation %d is not %d hex-encoded bytes", gen, keyLen)
		}
		r.keys[gen] = b
	}
	if _, ok := r.keys[r.cur]; !ok {
		return nil, fmt.Errorf("current generation %d has no key", r.cur)
	}
	return r, nil
}
