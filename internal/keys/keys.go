// Package keys is vmeta's key manager: secrets (LUKS passphrases) addressed
// by UUID and owned by a project, generated from crypto/rand and kept in
// the store only wrapped — AES-256-GCM under a key-encryption key (KEK)
// that lives in a 0600 file in the data directory, never in the store.
//
// Every ciphertext binds, as additional data, the KEK's id and generation
// and the secret's UUID: a wrapped value copied onto another secret's
// record, or one presented under another generation, does not unwrap. The
// KEK file keeps the generations still in use (the current one wraps, all
// of them unwrap): RotateKEK adds a generation, rewraps every secret in
// batches and then retires the older ones (see rotate.go).
//
// The store holds, besides the secrets, a check record per KEK (its id,
// generation and a wrapped known value). Open refuses to start when the
// store has a check record for this host and the KEK file is missing
// while secrets wrapped by it exist, or when the file's key does not
// unwrap the check: a silently re-created KEK would orphan every secret.
package keys

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmeta/vmeta/internal/atomicfile"
	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/uuid"
)

// KEKFile is the key-encryption key file's name in the data directory.
const KEKFile = "key-encryption-key.json"

// Record key prefixes in the store.
const (
	secretPrefix = "keys/secret/"
	checkPrefix  = "keys/kek/"
)

// keyLen is the length of a KEK (AES-256).
const keyLen = 32

// PassphraseBytes is the entropy of a generated passphrase; it is
// hex-encoded (64 characters), so it is text everywhere it goes (qemu-img,
// libvirt, QEMU).
const PassphraseBytes = 32

// MaxPayload bounds a passphrase a user brings.
const MaxPayload = 1024

// Sentinel errors.
var (
	// ErrNotFound: no such secret (or not one the caller may see).
	ErrNotFound = store.ErrNotFound
	// ErrKEK: the key-encryption key is missing or does not match the
	// store; the daemon must not start.
	ErrKEK = errors.New("key-encryption key")
	// ErrInvalid: a request field is malformed.
	ErrInvalid = errkind.New(errkind.Invalid, "invalid secret request")
	// ErrInUse: the secret belongs to a disk that still exists.
	ErrInUse = errkind.New(errkind.Conflict, "secret in use")
)

// Store is what the key manager needs: versioned records.
type Store interface {
	store.Records
}

// kekFile is the KEK file's content.
type kekFile struct {
	// KeyID names this key-encryption key (random, set on creation).
	KeyID string `json:"key_id"`
	// Current is the generation new wraps use.
	Current int64 `json:"current"`
	// Keys are every generation's key, hex.
	Keys map[string]string `json:"keys"`
	// Created is when the key was made.
	Created time.Time `json:"created"`
}

// checkRecord is the store's proof of a KEK: created by Open on the first
// start, verified on every later one.
type checkRecord struct {
	KeyID   string              `json:"key_id"`
	Host    string              `json:"host"`
	Created time.Time           `json:"created"`
	Check   store.WrappedSecret `json:"check"`
}

// checkValue is what the check record wraps.
var checkValue = []byte("vmeta key-encryption key check v1")

// Owner is what a secret was made for: a disk of an instance (deleted with
// the disk), or nothing (a user's secret).
type Owner struct {
	// Host is the host controller whose instance it is.
	Host         string `json:"host,omitempty"`
	InstanceUUID string `json:"instance_uuid,omitempty"`
	InstanceName string `json:"instance_name,omitempty"`
	Disk         string `json:"disk,omitempty"`
}

// Secret is a secret's metadata; the passphrase is never part of it.
type Secret struct {
	UUID      string    `json:"uuid"`
	Name      string    `json:"name,omitempty"`
	ProjectID string    `json:"project_id"`
	Type      string    `json:"secret_type"` // "passphrase"
	Created   time.Time `json:"created"`
	Owner     *Owner    `json:"owner,omitempty"`
	// KeyID and Generation name the KEK that wraps it.
	KeyID      string `json:"key_id"`
	Generation int64  `json:"generation"`
	// Version is the store record's version.
	Version int64 `json:"-"`
}

// secretRecord is a secret as stored.
type secretRecord struct {
	Secret
	Wrapped store.WrappedSecret `json:"wrapped"`
	// Pending is the new passphrase of a disk passphrase rotation in
	// progress (persisted before it is added to a LUKS key slot, made
	// current in one write with Wrapped once it is proven to open the
	// disk). Its additional data names the secret as PendingID(UUID), so
	// it cannot be swapped with Wrapped. A KEK rotation rewraps it too.
	Pending *store.WrappedSecret `json:"pending,omitempty"`
}

// CheckRecordKey is the store key of host's check record: a store that
// has it has held this host's secrets.
func CheckRecordKey(host string) string { return checkPrefix + host }

// PendingID is the id bound into a pending passphrase's ciphertext.
func PendingID(uuid string) string { return uuid + "#pending" }

// Manager creates, reads and deletes secrets. It is safe for concurrent
// use, a KEK rotation (RotateKEK) included.
type Manager struct {
	st    Store
	keyID string
	host  string
	now   func() time.Time

	// ring is the KEK's generations as the file has them; a rotation
	// replaces it whole.
	ring atomic.Pointer[keyring]
	// sealMu is held shared by every write of a newly wrapped value (wrap
	// and store write), and exclusively by a rotation while it switches
	// the current generation: once the switch is done no write of the
	// older generation is still in flight (see sealing).
	sealMu sync.RWMutex

	// path is the KEK file; created says whether Open created it.
	path    string
	created bool
	// rotateMu makes rotations one at a time; batch is their write batch.
	rotateMu sync.Mutex
	batch    int

	// fileInfo is the key file as last read (refresh.go).
	fileMu   sync.Mutex
	fileInfo os.FileInfo
}

// keyring is the generations of a KEK: cur wraps, all of them unwrap.
type keyring struct {
	cur  int64
	keys map[int64][]byte
}

// current returns the generation new wraps use.
func (m *Manager) current() int64 { return m.ring.Load().cur }

// sealing runs fn, which wraps a value (m.wrap) and writes it to the
// store, so that a KEK rotation switching generations waits for it: a
// value wrapped under the old generation is then in the store before the
// rotation lists what it has to rewrap.
//
// A write that creates a record (expect version 0) or writes it blindly
// (-1) with a newly wrapped value must go through it: without it, a value
// wrapped just before the switch could land after the rotation's last
// listing, and its generation be retired. A read-modify-write under
// compare-and-swap on the version it read needs no sealing: if it read a
// value of the old generation, the rotation rewrites that record (one of
// the two writes then conflicts and is redone, or the rotation's next
// listing finds the value); if it read one of the new generation, it
// wraps after the switch.
func (m *Manager) sealing(fn func() error) error {
	m.refresh()
	m.sealMu.RLock()
	defer m.sealMu.RUnlock()
	return fn()
}

// Options configure Open.
type Options struct {
	// Host names this host: its check record is keys/kek/<host>.
	Host string
	// RotateBatch is how many secrets a KEK rotation rewraps per store
	// write (1 to store.MaxRecordWrites; 0: DefaultRotateBatch).
	RotateBatch int
}

// Open loads (or, on the very first start, creates) the KEK in
// dataDir/KEKFile and checks it against the store:
//
//   - no file and no check record: a new KEK is generated (crypto/rand),
//     written 0600 with atomicfile, and a check record stored;
//   - no file but a check record: ErrKEK (restore the file);
//   - a file whose key does not unwrap the check record, or whose id
//     differs: ErrKEK (the wrong file);
//   - a file and no check record (a new store): the check is stored.
func Open(ctx context.Context, st Store, dataDir string, opts Options) (*Manager, error) {
	if opts.Host == "" {
		opts.Host = "local"
	}
	switch {
	case opts.RotateBatch == 0:
		opts.RotateBatch = DefaultRotateBatch
	case opts.RotateBatch < 0 || opts.RotateBatch > store.MaxRecordWrites:
		return nil, fmt.Errorf("%w: rotate batch %d: must be 1 to %d", ErrInvalid, opts.RotateBatch, store.MaxRecordWrites)
	}
	if err := store.CheckKey(checkPrefix + opts.Host); err != nil {
		return nil, fmt.Errorf("key manager: host %q: %w", opts.Host, err)
	}
	path := filepath.Join(dataDir, KEKFile)
	checkKey := checkPrefix + opts.Host
	rec, err := st.Record(ctx, checkKey)
	var check *checkRecord
	switch {
	case err == nil:
		check = &checkRecord{}
		if err := json.Unmarshal(rec.Value, check); err != nil {
			return nil, fmt.Errorf("key manager: check record %s: %w", checkKey, err)
		}
	case errors.Is(err, store.ErrNotFound):
	default:
		return nil, fmt.Errorf("key manager: read check record %s: %w", checkKey, err)
	}

	fi, _ := os.Stat(path)
	kf, err := readKEK(path)
	created := false
	if errors.Is(err, fs.ErrNotExist) && check != nil {
		// A check record without its key: fatal if any secret depends on
		// that key; with none (a data directory replaced before anything
		// was encrypted) nothing is lost by a new key.
		n, lerr := countWrappedBy(ctx, st, check.KeyID)
		if lerr != nil {
			return nil, fmt.Errorf("key manager: %w", lerr)
		}
		if n == 0 {
			if err := st.DeleteRecord(ctx, checkKey, rec.Version); err != nil {
				return nil, fmt.Errorf("key manager: replace the check record of key %s, which wraps no secret: %w", check.KeyID, err)
			}
			check = nil
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist) && check != nil:
		return nil, fmt.Errorf("%w: %s is missing, but the store holds secrets wrapped by key %s of host %s (created %s): restore the file from a backup; hostctl does not create a new key, which would make every stored secret unreadable",
			ErrKEK, path, check.KeyID, check.Host, check.Created.UTC().Format(time.RFC3339))
	case errors.Is(err, fs.ErrNotExist):
		if kf, err = createKEK(path); err != nil {
			return nil, fmt.Errorf("key manager: %w", err)
		}
		created = true
	case err != nil:
		return nil, fmt.Errorf("%w: %s: %w", ErrKEK, path, err)
	}
	m := &Manager{st: st, keyID: kf.KeyID, host: opts.Host, now: time.Now, path: path, created: created, batch: opts.RotateBatch}
	if created {
		fi, _ = os.Stat(path)
	}
	m.fileInfo = fi
	ring, err := kf.ring()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKEK, path, err)
	}
	m.ring.Store(ring)

	if check != nil {
		if check.KeyID != kf.KeyID {
			return nil, fmt.Errorf("%w: %s holds key %s, but the store's secrets of host %s are wrapped by key %s: this is not this host's key file",
				ErrKEK, path, kf.KeyID, check.Host, check.KeyID)
		}
		if g := check.Check.Generation; ring.keys[g] == nil {
			// The store was rotated past this file: a backup from
			// before a key rotation (or the file of an unfinished one,
			// replaced).
			return nil, fmt.Errorf("%w: %s (key %s) has generations %v, but the store's check record %s is wrapped by generation %d: restore the key file written by that rotation (a backup older than the last key rotation does not open the secrets rewrapped since)",
				ErrKEK, path, kf.KeyID, m.KEK().Generations, checkKey, g)
		}
		got, err := m.unwrap(check.Check, "check:"+opts.Host)
		if err != nil || subtle.ConstantTimeCompare(got, checkValue) != 1 {
			return nil, fmt.Errorf("%w: %s (key %s) does not unwrap the store's check record %s: the file was altered or replaced", ErrKEK, path, kf.KeyID, checkKey)
		}
		return m, nil
	}
	w, err := m.wrap(checkValue, "check:"+opts.Host)
	if err != nil {
		return nil, err
	}
	val, err := json.Marshal(checkRecord{KeyID: kf.KeyID, Host: opts.Host, Created: m.now().UTC(), Check: w})
	if err != nil {
		return nil, err
	}
	if _, err := st.PutRecord(ctx, checkKey, val, 0); err != nil {
		return nil, fmt.Errorf("key manager: store check record %s: %w", checkKey, err)
	}
	return m, nil
}

// countWrappedBy counts the secrets wrapped by key keyID.
func countWrappedBy(ctx context.Context, st Store, keyID string) (int, error) {
	recs, err := st.Records(ctx, secretPrefix)
	if err != nil {
		return 0, fmt.Errorf("list secrets: %w", err)
	}
	n := 0
	for _, r := range recs {
		var sr secretRecord
		if json.Unmarshal(r.Value, &sr) != nil || sr.Wrapped.KeyID == keyID {
			n++ // an unreadable record counts: better refuse than orphan it
		}
	}
	return n, nil
}

func readKEK(path string) (*kekFile, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("mode %v: the key file must be readable by its owner only (chmod 600)", fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseKEK(b)
}

// parseKEK parses a key file; every generation must be a positive number
// with a key of keyLen hex-encoded bytes, the current one among them.
func parseKEK(b []byte) (*kekFile, error) {
	var kf kekFile
	if err := json.Unmarshal(b, &kf); err != nil {
		return nil, fmt.Errorf("not a key file: %w", err)
	}
	if kf.KeyID == "" || kf.Current < 1 || len(kf.Keys) == 0 {
		return nil, errors.New("not a key file: no key_id, current generation or keys")
	}
	if err := store.CheckKey(kf.KeyID); err != nil || strings.Contains(kf.KeyID, "/") {
		return nil, fmt.Errorf("key_id %q: must be letters, digits and ._:- only", kf.KeyID)
	}
	for g, k := range kf.Keys {
		gen, err := strconv.ParseInt(g, 10, 64)
		if err != nil || gen < 1 {
			return nil, fmt.Errorf("generation %q is not a positive number", g)
		}
		if raw, err := hex.DecodeString(k); err != nil || len(raw) != keyLen {
			return nil, fmt.Errorf("generation %d is not %d hex-encoded bytes", gen, keyLen)
		}
	}
	if _, ok := kf.Keys[strconv.FormatInt(kf.Current, 10)]; !ok {
		return nil, fmt.Errorf("current generation %d has no key", kf.Current)
	}
	return &kf, nil
}

func createKEK(path string) (*kekFile, error) {
	key := make([]byte, keyLen)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate key-encryption key: %w", err)
	}
	kf := &kekFile{KeyID: "kek-" + NewUUID()[:8], Current: 1, Keys: map[string]string{"1": hex.EncodeToString(key)}, Created: time.Now().UTC()}
	b, err := json.MarshalIndent(kf, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := atomicfile.CreateExclusive(path, append(b, '\n'), 0o600); err != nil {
		return nil, fmt.Errorf("write key-encryption key: %w", err)
	}
	return kf, nil
}

// KeyID names the manager's key-encryption key (random per data
// directory); hostctl uses it to tell its libvirt secrets from others'.
func (m *Manager) KeyID() string { return m.keyID }

// aad is the additional data bound into a ciphertext.
func (m *Manager) aad(gen int64, id string) []byte {
	return []byte("vmeta-keys-v1\x00" + m.keyID + "\x00" + strconv.FormatInt(gen, 10) + "\x00" + id)
}

// wrap seals plain under the current generation, bound to id. A caller
// that stores the result does so inside m.sealing.
func (m *Manager) wrap(plain []byte, id string) (store.WrappedSecret, error) {
	return m.wrapWith(m.ring.Load(), plain, id)
}

func (m *Manager) wrapWith(r *keyring, plain []byte, id string) (store.WrappedSecret, error) {
	aead, err := newAEAD(r.keys[r.cur])
	if err != nil {
		return store.WrappedSecret{}, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return store.WrappedSecret{}, fmt.Errorf("wrap: nonce: %w", err)
	}
	return store.WrappedSecret{KeyID: m.keyID, Generation: r.cur, Nonce: nonce,
		Ciphertext: aead.Seal(nil, nonce, plain, m.aad(r.cur, id))}, nil
}

// errRetired is wrapped (with ErrKEK) by unwrap's error for a generation
// older than the current one that the key file no longer has: a KEK
// rotation rewrapped the value and then retired the generation after the
// caller had read the record, so reading the record again gives the
// rewrapped value. A reader that loads a record and unwraps it retries
// once on it (Passphrase does).
var errRetired = errors.New("generation retired")

func (m *Manager) unwrap(w store.WrappedSecret, id string) ([]byte, error) {
	r := m.ring.Load()
	if _, ok := r.keys[w.Generation]; !ok && w.KeyID == m.keyID {
		// A generation this manager has not read (or has retired):
		// another process may have rotated the key file.
		m.refresh()
		r = m.ring.Load()
	}
	return m.unwrapWith(r, w, id)
}

func (m *Manager) unwrapWith(r *keyring, w store.WrappedSecret, id string) ([]byte, error) {
	if w.KeyID != m.keyID {
		return nil, fmt.Errorf("%w: secret %s is wrapped by key %s, this host's key is %s", ErrKEK, id, w.KeyID, m.keyID)
	}
	key, ok := r.keys[w.Generation]
	if !ok {
		if w.Generation < r.cur {
			return nil, fmt.Errorf("%w: %w: secret %s is wrapped by generation %d of key %s, which the key file does not have", ErrKEK, errRetired, id, w.Generation, m.keyID)
		}
		return nil, fmt.Errorf("%w: secret %s is wrapped by generation %d of key %s, which the key file does not have", ErrKEK, id, w.Generation, m.keyID)
	}
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	if len(w.Nonce) != aead.NonceSize() {
		return nil, fmt.Errorf("unwrap secret %s: nonce of %d bytes", id, len(w.Nonce))
	}
	p, err := aead.Open(nil, w.Nonce, w.Ciphertext, m.aad(w.Generation, id))
	if err != nil {
		return nil, fmt.Errorf("unwrap secret %s: authentication failed (altered, or not this secret's value)", id)
	}
	return p, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// Request creates a secret.
type Request struct {
	Name      string
	ProjectID string
	Owner     *Owner
	// Payload is the passphrase a user brings; generated when nil.
	Payload []byte
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)

// Check validates a request (field, value and rule in the error).
func (r Request) Check() error {
	if r.Name != "" && !nameRE.MatchString(r.Name) {
		return fmt.Errorf("%w: name %q: must be 1-128 letters, digits and ._:@- starting with a letter or digit", ErrInvalid, r.Name)
	}
	if r.ProjectID == "" && r.Owner == nil {
		return fmt.Errorf("%w: project_id: required (a secret is owned by a project)", ErrInvalid)
	}
	if r.ProjectID != "" && !nameRE.MatchString(r.ProjectID) {
		return fmt.Errorf("%w: project_id %q: must be 1-128 letters, digits and ._:@- starting with a letter or digit", ErrInvalid, r.ProjectID)
	}
	if r.Payload != nil {
		switch {
		case len(r.Payload) == 0:
			return fmt.Errorf("%w: payload: empty (leave it out to have one generated)", ErrInvalid)
		case len(r.Payload) > MaxPayload:
			return fmt.Errorf("%w: payload: %d bytes, more than %d", ErrInvalid, len(r.Payload), MaxPayload)
		}
	}
	return nil
}

// Create makes a secret: the request's payload, or PassphraseBytes from
// crypto/rand, hex-encoded. Only the wrapped value is stored.
func (m *Manager) Create(ctx context.Context, req Request) (Secret, error) {
	if err := req.Check(); err != nil {
		return Secret{}, err
	}
	pass := req.Payload
	if pass == nil {
		raw := make([]byte, PassphraseBytes)
		if _, err := rand.Read(raw); err != nil {
			return Secret{}, fmt.Errorf("generate passphrase: %w", err)
		}
		pass = []byte(hex.EncodeToString(raw))
		clear(raw)
		defer clear(pass)
	}
	s := Secret{UUID: NewUUID(), Name: req.Name, ProjectID: req.ProjectID, Type: "passphrase",
		Created: m.now().UTC().Truncate(time.Second), Owner: req.Owner, KeyID: m.keyID}
	err := m.sealing(func() error {
		w, err := m.wrap(pass, s.UUID)
		if err != nil {
			return err
		}
		s.Generation = w.Generation
		val, err := json.Marshal(secretRecord{Secret: s, Wrapped: w})
		if err != nil {
			return err
		}
		rec, err := m.st.PutRecord(ctx, secretPrefix+s.UUID, val, 0)
		if err != nil {
			return fmt.Errorf("create secret: %w", err)
		}
		s.Version = rec.Version
		return nil
	})
	if err != nil {
		return Secret{}, err
	}
	return s, nil
}

// CheckUUID validates a secret UUID (either case: model.IsUUID).
func CheckUUID(id string) error {
	_, err := secretID(id)
	return err
}

// secretID returns a secret UUID in the canonical (lower-case) form its
// record is named by and its passphrase sealed to.
func secretID(id string) (string, error) {
	c, ok := uuid.Canonical(id)
	if !ok {
		return "", fmt.Errorf("%w: secret uuid %q: not a UUID (8-4-4-4-12 hex digits)", ErrInvalid, id)
	}
	return c, nil
}

func (m *Manager) load(ctx context.Context, id string) (secretRecord, error) {
	id, err := secretID(id)
	if err != nil {
		return secretRecord{}, err
	}
	rec, err := m.st.Record(ctx, secretPrefix+id)
	if errors.Is(err, store.ErrNotFound) {
		return secretRecord{}, fmt.Errorf("secret %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return secretRecord{}, fmt.Errorf("secret %s: %w", id, err)
	}
	var sr secretRecord
	if err := json.Unmarshal(rec.Value, &sr); err != nil {
		return secretRecord{}, fmt.Errorf("secret %s: decode: %w", id, err)
	}
	sr.Version = rec.Version
	return sr, nil
}

// Get returns a secret's metadata.
func (m *Manager) Get(ctx context.Context, id string) (Secret, error) {
	sr, err := m.load(ctx, id)
	return sr.Secret, err
}

// Passphrase returns a secret's passphrase, unwrapped. The caller clears
// it (clear(b)) when done and never logs it.
func (m *Manager) Passphrase(ctx context.Context, id string) ([]byte, error) {
	id, err := secretID(id)
	if err != nil {
		return nil, err
	}
	sr, err := m.load(ctx, id)
	if err != nil {
		return nil, err
	}
	p, err := m.unwrap(sr.Wrapped, id)
	if errors.Is(err, errRetired) {
		// Read before a KEK rotation rewrapped it and retired its
		// generation: the record now holds the rewrapped value.
		if sr, err = m.load(ctx, id); err != nil {
			return nil, err
		}
		p, err = m.unwrap(sr.Wrapped, id)
	}
	return p, err
}

// List returns every secret's metadata (of one project when project is
// not empty), sorted by UUID.
func (m *Manager) List(ctx context.Context, project string) ([]Secret, error) {
	recs, err := m.st.Records(ctx, secretPrefix)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	out := []Secret{}
	for _, rec := range recs {
		var sr secretRecord
		if err := json.Unmarshal(rec.Value, &sr); err != nil {
			return nil, fmt.Errorf("secret record %s: %w", rec.Key, err)
		}
		sr.Version = rec.Version
		if project == "" || sr.ProjectID == project {
			out = append(out, sr.Secret)
		}
	}
	return out, nil
}

// Delete removes a secret; a missing one is ErrNotFound.
func (m *Manager) Delete(ctx context.Context, id string) error {
	id, err := secretID(id)
	if err != nil {
		return err
	}
	if err := m.st.DeleteRecord(ctx, secretPrefix+id, -1); err != nil {
		return fmt.Errorf("delete secret %s: %w", id, err)
	}
	return nil
}

// NewUUID returns a random (version 4) UUID.
func NewUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
