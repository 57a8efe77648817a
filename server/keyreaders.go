package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vmeta/vmeta/internal/store"
)

// Every metadata reader (hostctl serve's metadata service, each
// vmeta-metadata replica) with key files and a store that keeps records
// says which key generations it has loaded, in a record of its own under
// KeyReaderPrefix: after every reload and every KeyReaderHeartbeat. A key
// rotation reads them (KeyReaders) and makes a new key current only once
// every live reader has loaded it, so no reader rejects a token signed
// with it. The record holds generations and counts, never a key.

// KeyReaderPrefix is the prefix of the readers' records.
const KeyReaderPrefix = "metadata-key-reader/"

// DefaultKeyReaderHeartbeat is how often a reader rewrites its record
// (Options.KeyReaderHeartbeat); a record not rewritten within three
// heartbeats is of a reader that is gone.
const DefaultKeyReaderHeartbeat = 30 * time.Second

// KeyReader is a reader's record.
type KeyReader struct {
	// ID names the reader (host name and process id).
	ID string `json:"id"`
	// Keys are its key files by name ("token", "proxy").
	Keys map[string]KeyReaderFile `json:"keys"`
	// Updated is when the record was written; Expires when, without a
	// new write, the reader counts as gone.
	Updated time.Time `json:"updated"`
	Expires time.Time `json:"expires"`
}

// KeyReaderFile is what a reader has loaded from one key file.
type KeyReaderFile struct {
	// Set is the file's key set id (KeySetOf; "": the file names none).
	Set string `json:"set,omitempty"`
	// Generation of its current key, Newest the highest loaded (a next
	// key's), Count the keys loaded.
	Generation int64 `json:"generation"`
	Newest     int64 `json:"newest"`
	Count      int64 `json:"count"`
}

// defaultReaderID is the host name and the process id.
func defaultReaderID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "unknown"
	}
	id := h + "-" + strconv.Itoa(os.Getpid())
	// Record keys allow letters, digits and "._:-".
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:-", r) {
			return r
		}
		return '-'
	}, id)
}

// keyRecords returns the store's records, when the server reports its
// keys (it has key files, and the store keeps records).
func (s *Server) keyRecords() store.Records {
	if len(s.keyFiles) == 0 || s.readerID == "" {
		return nil
	}
	recs, _ := s.docs.(store.Records)
	return recs
}

// reportKeys writes this reader's record (best effort: a reader that
// cannot write it is waited for by no rotation, and the rotations' own
// delay covers it).
func (s *Server) reportKeys(ctx context.Context) {
	recs := s.keyRecords()
	if recs == nil {
		return
	}
	now := time.Now().UTC()
	r := KeyReader{ID: s.readerID, Keys: s.keyStates(), Updated: now, Expires: now.Add(3 * s.heartbeat)}
	state := s.keysState()
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.storeTimeout)
	defer cancel()
	if _, err := recs.PutRecord(ctx, KeyReaderPrefix+s.readerID, b, -1); err != nil {
		s.log.Debug("metadata key reader record not written", "err", err)
		s.reported.Store("")
		return
	}
	s.reported.Store(state)
}

func (s *Server) keyStates() map[string]KeyReaderFile {
	m := make(map[string]KeyReaderFile, len(s.keyFiles))
	for _, f := range s.keyFiles {
		m[f.name] = KeyReaderFile{Set: f.Set(), Generation: f.gen.Load(), Newest: f.newest.Load(), Count: f.count.Load()}
	}
	return m
}

// keysState is what is loaded, as a comparable string.
func (s *Server) keysState() string {
	b, _ := json.Marshal(s.keyStates()) // sorted keys
	return string(b)
}

// forgetKeys deletes this reader's record (on shutdown).
func (s *Server) forgetKeys() {
	recs := s.keyRecords()
	if recs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
	defer cancel()
	_ = recs.DeleteRecord(ctx, KeyReaderPrefix+s.readerID, -1)
}

// KeyReaders returns the records of the live readers (not expired at
// now), sorted by ID; records expired for over an hour are deleted.
func KeyReaders(ctx context.Context, recs store.Records, now time.Time) ([]KeyReader, error) {
	list, err := recs.Records(ctx, KeyReaderPrefix)
	if err != nil {
		return nil, fmt.Errorf("metadata key readers: %w", err)
	}
	var out []KeyReader
	for _, rec := range list {
		var r KeyReader
		if err := json.Unmarshal(rec.Value, &r); err != nil {
			continue // not ours to judge; a reader rewrites its own
		}
		if !r.Expires.After(now) {
			if now.Sub(r.Expires) > time.Hour {
				err := recs.DeleteRecord(ctx, rec.Key, rec.Version)
				if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
					return nil, fmt.Errorf("metadata key readers: %w", err)
				}
			}
			continue
		}
		out = append(out, r)
	}
	return out, nil
}
