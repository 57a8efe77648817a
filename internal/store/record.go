package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Record is one versioned value of the generic record API: what the
// registries (flavors, images, shares and their mappings, the PCI device
// inventory, host heartbeats, key-rotation status) keep in the store. The
// store does not look into Value.
type Record struct {
	Key   string
	Value []byte
	// Version is assigned by the store: 1 on create, +1 on every put. A
	// record deleted and created again starts at 1.
	Version int64
}

// Records is a flat, ordered namespace of versioned records with
// compare-and-swap writes.
//
// Each call is atomic on its own (one transaction on bolt, one script on
// Redis) and there is no multi-key transaction: a registry that must change
// two records together keeps them in one record, or orders its writes so
// that a reader never relies on the pair. Record writes are not published
// on the change feed (Watch).
//
// Keys follow the rules of CheckKey; a registry names its records under a
// prefix of its own ("flavor/m1.small", "device/0000:3b:00.0").
type Records interface {
	// Record returns the record stored under key, or ErrNotFound.
	Record(ctx context.Context, key string) (Record, error)
	// PutRecord stores value under key if the stored version is
	// expectVersion: 0 means the record must not exist, > 0 that its
	// version must be exactly that, and < 0 skips the check. On a mismatch
	// it returns ErrConflict (wrapped with the key, the expected and the
	// stored version) and changes nothing. It returns the record as
	// stored, with its new version.
	PutRecord(ctx context.Context, key string, value []byte, expectVersion int64) (Record, error)
	// DeleteRecord removes the record under key, with the same check of
	// expectVersion as PutRecord (0, "must not exist", always conflicts
	// with a record that exists). A missing record is ErrNotFound,
	// whatever expectVersion is.
	DeleteRecord(ctx context.Context, key string, expectVersion int64) error
	// Records returns every record whose key starts with prefix ("" for
	// all), sorted by key. The prefix is a plain string prefix: to list
	// one level of a hierarchy, end it with "/" ("share/" does not list
	// "shares/…"). The list is not a snapshot on Redis: a record written
	// while it is read may be in it or not.
	Records(ctx context.Context, prefix string) ([]Record, error)
}

// MaxKeyLen is the longest record key, in bytes.
const MaxKeyLen = 512

// ErrInvalidKey is wrapped by the errors of CheckKey and CheckPrefix.
var ErrInvalidKey = errors.New("invalid record key")

// CheckKey reports whether key is a valid record key: 1 to MaxKeyLen bytes
// of ASCII letters, digits and "._:/-", neither starting nor ending with
// "/" and without "//" (so that a prefix ending in "/" names exactly one
// level of a hierarchy). The charset leaves out what a backend would have
// to escape (spaces, "*?[]" of Redis patterns, "{}" of Redis hash tags).
func CheckKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if err := checkChars(key); err != nil {
		return err
	}
	switch {
	case strings.HasPrefix(key, "/"), strings.HasSuffix(key, "/"):
		return fmt.Errorf("%w %q: starts or ends with \"/\"", ErrInvalidKey, key)
	case strings.Contains(key, "//"):
		return fmt.Errorf("%w %q: contains \"//\"", ErrInvalidKey, key)
	}
	return nil
}

// CheckPrefix reports whether prefix can start a record key (the empty
// prefix, which lists every record, included): the characters and length
// of CheckKey, no leading "/" and no "//".
func CheckPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := checkChars(prefix); err != nil {
		return err
	}
	if strings.HasPrefix(prefix, "/") || strings.Contains(prefix, "//") {
		return fmt.Errorf("%w prefix %q: starts with \"/\" or contains \"//\"", ErrInvalidKey, prefix)
	}
	return nil
}

func checkChars(s string) error {
	if len(s) > MaxKeyLen {
		return fmt.Errorf("%w %.40q… (%d bytes): longer than %d bytes", ErrInvalidKey, s, len(s), MaxKeyLen)
	}
	for i := 0; i < len(s); i++ {
		if !keyChar(s[i]) {
			return fmt.Errorf("%w %q: character %q at byte %d is not one of A-Z a-z 0-9 . _ : / -", ErrInvalidKey, s, s[i:i+1], i)
		}
	}
	return nil
}

func keyChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == ':' || c == '/' || c == '-'
}
