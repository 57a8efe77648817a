package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A key file written by a key rotation (hostctl/metadatakeys) says of
// each key which generation it is and where it stands, on an annotation
// line just above the key:
//
//	# vmeta-key generation=5 state=current since=2026-11-24T12:00:00Z
//	4f1c…
//	# vmeta-key generation=6 state=next since=2026-11-24T12:00:00Z
//	9a0b…
//	# vmeta-key generation=4 state=prior since=2026-11-24T11:00:00Z
//	77de…
//
// The current key is always the first key of the file (it signs); every
// other key is accepted (a prior key still valid, or the next key being
// distributed to every reader before it becomes current). Readers need
// nothing but the order (ReadKeyFile); the annotations are for the
// rotation and for the operator. A file without annotations (written by
// hand) is valid: its first key is current, the others prior, generation
// unknown (0).

// A key file may also name the key set it holds, on a line of its own:
//
//	# vmeta-keyset id=3f9a0c…
//
// Readers put it in their records (KeyReaderFile.Set), so a rotation
// waits only for the readers of its own file, not for those of another
// host's file of the same name. A file without it (written by hand, or
// by an older vmeta) gets one at its first rotation.

// keySetLine starts the key set line.
const keySetLine = "# vmeta-keyset id="

// KeySetOf returns the key set id a key file's text names ("" if none,
// or if malformed: 1 to 64 of a-z, 0-9 and "-").
func KeySetOf(data []byte) string {
	for line := range bytes.Lines(data) {
		l := bytes.TrimSpace(line)
		if id, ok := bytes.CutPrefix(l, []byte(keySetLine)); ok && validSetID(string(id)) {
			return string(id)
		}
	}
	return ""
}

func validSetID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// NewKeySetID returns a new random key set id.
func NewKeySetID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// KeyState is where a key of a key file stands.
type KeyState string

// The states of a key.
const (
	// KeyCurrent signs (and verifies); it is the file's first key.
	KeyCurrent KeyState = "current"
	// KeyNext is being distributed: accepted, not yet used to sign.
	KeyNext KeyState = "next"
	// KeyPrior was current before: still accepted, until dropped.
	KeyPrior KeyState = "prior"
)

// keyAnnotation starts the annotation line of a key.
const keyAnnotation = "# vmeta-key "

// KeyEntry is one key of a key file with what its annotation says.
type KeyEntry struct {
	Key []byte
	// Generation of the key (0: unknown).
	Generation int64
	// State ("" when the file does not say: the first key is current,
	// the others prior).
	State KeyState
	// Since is when the key entered its state (zero: unknown).
	Since time.Time
}

// String never shows the key.
func (e KeyEntry) String() string {
	return fmt.Sprintf("key generation %d %s since %s", e.Generation, e.State, e.Since.Format(time.RFC3339))
}

// ParseKeyFile parses the text of a key file (see ReadKeyFile) with its
// annotations. It fails, naming the line (never its text, which may be a
// key), on a malformed annotation, and when the file holds no key.
func ParseKeyFile(data []byte) ([]KeyEntry, error) {
	var (
		out     []KeyEntry
		pending *KeyEntry
		pline   int
		n       int
	)
	for line := range bytes.Lines(data) {
		n++
		l := bytes.TrimSpace(line)
		switch {
		case len(l) == 0:
		case bytes.HasPrefix(l, []byte(keyAnnotation)) || string(l) == strings.TrimSpace(keyAnnotation):
			if pending != nil {
				return nil, fmt.Errorf("line %d: key annotation not followed by a key", pline)
			}
			e, err := parseAnnotation(string(l))
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			pending, pline = &e, n
		case l[0] == '#':
		default:
			e := KeyEntry{}
			if pending != nil {
				e = *pending
				pending = nil
			}
			e.Key = bytes.Clone(l)
			out = append(out, e)
		}
	}
	if pending != nil {
		return nil, fmt.Errorf("line %d: key annotation not followed by a key", pline)
	}
	if len(out) == 0 {
		return nil, errors.New("no key in it")
	}
	for i := range out {
		if out[i].State == "" {
			out[i].State = KeyPrior
			if i == 0 {
				out[i].State = KeyCurrent
			}
		}
	}
	if out[0].State != KeyCurrent {
		return nil, fmt.Errorf("the first key is %s, not %s (the first key signs)", out[0].State, KeyCurrent)
	}
	for _, e := range out[1:] {
		if e.State == KeyCurrent {
			return nil, fmt.Errorf("key generation %d is marked %s but is not the first key", e.Generation, KeyCurrent)
		}
	}
	return out, nil
}

func parseAnnotation(l string) (KeyEntry, error) {
	var e KeyEntry
	for _, f := range strings.Fields(strings.TrimPrefix(l, strings.TrimSpace(keyAnnotation)))[0:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return e, fmt.Errorf("key annotation field %q: must be name=value", f)
		}
		switch k {
		case "generation":
			g, err := strconv.ParseInt(v, 10, 64)
			if err != nil || g < 0 {
				return e, fmt.Errorf("key annotation generation %q: must be a whole number ≥ 0", v)
			}
			e.Generation = g
		case "state":
			switch s := KeyState(v); s {
			case KeyCurrent, KeyNext, KeyPrior:
				e.State = s
			default:
				return e, fmt.Errorf("key annotation state %q: must be current, next or prior", v)
			}
		case "since":
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return e, fmt.Errorf("key annotation since %q: must be an RFC 3339 time", v)
			}
			e.Since = t
		default:
			// Unknown fields are left for later versions.
		}
	}
	return e, nil
}

// FormatKeyFile returns the text of a key file holding entries in order
// (the first must be the current key), each with its annotation.
func FormatKeyFile(entries []KeyEntry) []byte { return FormatKeyFileSet("", entries) }

// FormatKeyFileSet is FormatKeyFile naming the key set (none when set is
// "").
func FormatKeyFileSet(set string, entries []KeyEntry) []byte {
	var b bytes.Buffer
	b.WriteString("# vmeta key file: one key per line, the current key first; the others are still accepted.\n")
	if set != "" {
		b.WriteString(keySetLine + set + "\n")
	}
	for _, e := range entries {
		b.WriteString(keyAnnotation)
		fmt.Fprintf(&b, "generation=%d state=%s", e.Generation, e.State)
		if !e.Since.IsZero() {
			fmt.Fprintf(&b, " since=%s", e.Since.UTC().Format(time.RFC3339))
		}
		b.WriteByte('\n')
		b.Write(e.Key)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Keys returns the keys of entries, in order.
func Keys(entries []KeyEntry) [][]byte {
	out := make([][]byte, len(entries))
	for i, e := range entries {
		out[i] = e.Key
	}
	return out
}

// DefaultKeyCheckInterval is how often Run compares the key files with
// what is loaded (Options.KeyCheckInterval).
const DefaultKeyCheckInterval = 10 * time.Second

// KeyFile is a key file loaded into a KeyRing, which Reload re-reads:
// the server reloads it when the store's change feed says a key rotated,
// every KeyCheckInterval, and on ReloadKeys (SIGHUP). A reload that finds
// the file missing, unreadable, malformed or empty keeps the keys already
// loaded and logs the error (never a key).
type KeyFile struct {
	name string
	path string
	ring *KeyRing
	log  *slog.Logger

	mu      sync.Mutex // serialises Reload
	sum     [sha256.Size]byte
	loaded  bool
	set     atomic.Pointer[string]
	gen     atomic.Int64 // generation of the current key
	newest  atomic.Int64 // highest generation loaded
	count   atomic.Int64 // keys loaded
	errors  atomic.Int64 // failed reloads
	lastErr atomic.Pointer[string]
	created bool // this process created the file (Config.Options)
}

// Created reports whether this process created the key file (its key
// is generation 1, minted now).
func (f *KeyFile) Created() bool { return f.created }

// NewKeyFile returns a KeyFile named name ("token", "proxy": in logs and
// metrics) for path, loading into ring. It does not read the file: call
// Reload.
func NewKeyFile(name, path string, ring *KeyRing, log *slog.Logger) *KeyFile {
	if log == nil {
		log = slog.Default()
	}
	return &KeyFile{name: name, path: path, ring: ring, log: log}
}

// Name returns the key file's name.
func (f *KeyFile) Name() string { return f.name }

// Path returns the file's path.
func (f *KeyFile) Path() string { return f.path }

// Ring returns the KeyRing the file loads into.
func (f *KeyFile) Ring() *KeyRing { return f.ring }

// Generation returns the generation of the loaded current key (0:
// unknown), Newest the highest generation loaded (a next key's).
func (f *KeyFile) Generation() int64 { return f.gen.Load() }

// Set returns the key set id of the loaded file ("": none).
func (f *KeyFile) Set() string {
	if p := f.set.Load(); p != nil {
		return *p
	}
	return ""
}

// Newest returns the highest key generation loaded.
func (f *KeyFile) Newest() int64 { return f.newest.Load() }

// Reload reads the file and, when its content changed since the last
// load, replaces the ring's keys. On error the ring keeps its keys.
func (f *KeyFile) Reload() (changed bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	changed, err = f.reload()
	if err != nil {
		f.errors.Add(1)
		msg := err.Error()
		if prev := f.lastErr.Swap(&msg); prev == nil || *prev != msg {
			f.log.Error("metadata key file reload failed; keeping the keys loaded before", "keys", f.name, "file", f.path, "err", err)
		}
		return false, err
	}
	f.lastErr.Store(nil)
	return changed, nil
}

// reloadQuiet is Reload without logging the error (the first load: its
// caller reports the error).
func (f *KeyFile) reloadQuiet() (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reload()
}

func (f *KeyFile) reload() (bool, error) {
	data, err := os.ReadFile(f.path)
	if err != nil {
		return false, fmt.Errorf("%s key file: %w", f.name, err)
	}
	sum := sha256.Sum256(data)
	if f.loaded && sum == f.sum {
		return false, nil
	}
	entries, err := ParseKeyFile(data)
	if err != nil {
		return false, fmt.Errorf("%s key file %s: %w", f.name, f.path, err)
	}
	f.ring.Set(Keys(entries)...)
	var newest int64
	for _, e := range entries {
		newest = max(newest, e.Generation)
	}
	first := !f.loaded
	f.sum, f.loaded = sum, true
	set := KeySetOf(data)
	f.set.Store(&set)
	f.gen.Store(entries[0].Generation)
	f.newest.Store(newest)
	f.count.Store(int64(len(entries)))
	if !first {
		f.log.Info("metadata key file reloaded", "keys", f.name, "file", f.path, "count", len(entries), "generation", entries[0].Generation, "newest_generation", newest)
	}
	return true, nil
}

// KeyFile returns the options' key file named name ("token", "proxy"),
// or nil.
func (o Options) KeyFile(name string) *KeyFile {
	for _, f := range o.KeyFiles {
		if f.name == name {
			return f
		}
	}
	return nil
}

// ReloadOnHangup reloads the key files (ReloadKeys) whenever the process
// receives SIGHUP, until ctx is done: the operator's manual path after
// editing a key file.
func (s *Server) ReloadOnHangup(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			s.log.Info("SIGHUP: reloading the metadata key files")
			if err := s.ReloadKeys(); err == nil {
				s.log.Info("metadata key files reloaded", "files", len(s.keyFiles))
			}
		}
	}
}
