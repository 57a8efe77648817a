package server

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/vmeta/vmeta/internal/atomicfile"
)

// Secrets is a list of secret keys of which several may be valid at once
// (the current one and prior ones, while a rotation overlaps): the current
// key signs, every key verifies. The server reads it on every use, so a
// rotation only has to swap what it returns.
type Secrets interface {
	// Current returns the key new signatures are made with (nil: none).
	Current() []byte
	// All returns every key a signature may have been made with, the
	// current one first.
	All() [][]byte
}

// KeyRing is a Secrets whose keys can be replaced atomically (by a key
// rotation, or a reload of the key file). The zero KeyRing holds no keys.
type KeyRing struct {
	keys atomic.Pointer[[][]byte]
}

// NewKeyRing returns a KeyRing holding keys, the current one first.
func NewKeyRing(keys ...[]byte) *KeyRing {
	k := &KeyRing{}
	k.Set(keys...)
	return k
}

// Set replaces the keys; empty keys are dropped. The slices are copied.
func (k *KeyRing) Set(keys ...[]byte) {
	cp := make([][]byte, 0, len(keys))
	for _, key := range keys {
		if len(key) > 0 {
			cp = append(cp, bytes.Clone(key))
		}
	}
	k.keys.Store(&cp)
}

// Current implements Secrets.
func (k *KeyRing) Current() []byte {
	if all := k.All(); len(all) > 0 {
		return all[0]
	}
	return nil
}

// All implements Secrets. The caller must not modify the result.
func (k *KeyRing) All() [][]byte {
	if p := k.keys.Load(); p != nil {
		return *p
	}
	return nil
}

// ReadKeyFile reads a key file: one key per line, the current key first,
// the others (prior keys, or a next key being distributed) still
// accepted; surrounding white space, empty lines and lines starting with
// "#" (comments, and the "# vmeta-key" annotations a key rotation writes,
// see ParseKeyFile) are ignored, and each key is used as the bytes of its
// line (as Nova uses its shared secret). It fails when the file holds no
// key. The keys are never logged.
func ReadKeyFile(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	entries, err := ParseKeyFile(data)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return Keys(entries), nil
}

// ReadOrCreateKeyFile reads a key file like ReadKeyFile; when the file
// does not exist it first creates it (mode 0600, parent directory 0700)
// holding one new random key of 32 bytes, hex-encoded, and a new key set
// id (KeySetOf); the key is annotated generation 1, current (every key
// vmeta creates starts at generation 1; a file written by hand has no
// annotation: generation 0). Two processes
// creating it at once end up with the same key: the file is written to a
// temporary name, synced, and linked into place only if still absent.
func ReadOrCreateKeyFile(path string) (keys [][]byte, created bool, err error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		created, err = createKeyFile(path)
		if err != nil {
			return nil, false, err
		}
	}
	keys, err = ReadKeyFile(path)
	return keys, created, err
}

func createKeyFile(path string) (bool, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("key file: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return false, fmt.Errorf("key file: %w", err)
	}
	data := FormatKeyFileSet(NewKeySetID(), []KeyEntry{{Key: []byte(hex.EncodeToString(raw)), Generation: 1, State: KeyCurrent, Since: time.Now().UTC()}})
	err := atomicfile.CreateExclusive(path, data, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return false, nil // another process won the race; use its key
	}
	if err != nil {
		return false, fmt.Errorf("key file: %w", err)
	}
	return true, nil
}
