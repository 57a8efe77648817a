// Package check validates and normalises what the store backends accept, so
// that bolt and redis refuse and rewrite input in exactly the same way.
//
// It is internal to internal/store: other parts validate their input with
// internal/model long before it reaches a store, and these checks only keep
// a backend's keys well formed (a UUID cannot break a Redis hash tag, an
// address is indexed in one canonical spelling).
package check

import (
	"fmt"
	"net/netip"
	"unicode"
	"unicode/utf8"

	"github.com/vmeta/vmeta/internal/store"
)

// Limits on identifiers. They are far above anything real and exist so that
// a key never exceeds a backend's limits (bbolt keys must stay below 32 KiB).
const (
	maxName = 253
	maxUUID = 128
	maxID   = 253
)

// Put validates an instance and its document for Store.Put and returns the
// form a backend stores: addresses in canonical form (see Addr) without
// duplicates, the document's InstanceUUID filled in when empty, and the
// store-assigned Revision and Version zeroed.
func Put(inst store.Instance, doc store.Document) (store.Instance, store.Document, error) {
	if err := Name(inst.Name); err != nil {
		return inst, doc, fmt.Errorf("put instance: %w", err)
	}
	if err := UUID(inst.UUID); err != nil {
		return inst, doc, fmt.Errorf("put instance %s: %w", inst.Name, err)
	}
	switch doc.InstanceUUID {
	case "":
		doc.InstanceUUID = inst.UUID
	case inst.UUID:
	default:
		return inst, doc, fmt.Errorf("put instance %s: document is for instance %q, not %q",
			inst.Name, doc.InstanceUUID, inst.UUID)
	}
	addrs := make([]string, 0, len(inst.Addresses))
	seen := make(map[string]bool, len(inst.Addresses))
	for _, a := range inst.Addresses {
		c, err := Addr(a)
		if err != nil {
			return inst, doc, fmt.Errorf("put instance %s: %w", inst.Name, err)
		}
		if !seen[c] {
			seen[c] = true
			addrs = append(addrs, c)
		}
	}
	if len(addrs) == 0 {
		addrs = nil
	}
	inst.Addresses = addrs
	inst.Revision = 0
	doc.Version = 0
	return inst, doc, nil
}

// Addr returns the canonical textual form of a source address: as
// net/netip prints it, with an IPv4-mapped IPv6 address (::ffff:10.0.0.5,
// what a dual-stack listener reports for an IPv4 caller) unmapped to its
// IPv4 form, so that either spelling finds the same instance.
func Addr(s string) (string, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return "", fmt.Errorf("invalid address %q: %w", s, err)
	}
	return a.Unmap().String(), nil
}

// Name checks an instance name: non-empty UTF-8 without control characters.
func Name(s string) error {
	return ident("name", s, maxName, func(r rune) bool { return !unicode.IsControl(r) })
}

// UUID checks an instance UUID. Any id made of ASCII letters, digits and
// "-._:" is accepted (canonical UUIDs are); braces in particular are not,
// because the Redis backend puts the UUID inside a {hash tag}.
func UUID(s string) error {
	return ident("uuid", s, maxUUID, func(r rune) bool {
		return r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' ||
			r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_' || r == ':')
	})
}

// Secret checks the instance UUID and id a secret is stored under.
func Secret(instanceUUID, id string) error {
	if err := UUID(instanceUUID); err != nil {
		return err
	}
	return ident("secret id", id, maxID, func(r rune) bool { return !unicode.IsControl(r) })
}

func ident(what, s string, maxLen int, ok func(rune) bool) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > maxLen:
		return fmt.Errorf("%s is longer than %d bytes", what, maxLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s %q is not valid UTF-8", what, s)
	}
	for _, r := range s {
		if !ok(r) {
			return fmt.Errorf("%s %q contains %q", what, s, r)
		}
	}
	return nil
}

// Conflict errors, worded the same by both backends. Each wraps
// store.ErrConflict; the caller adds the operation ("put instance web1: ").

// NameHeld reports that name belongs to the instance with UUID holder.
func NameHeld(name, holder string) error {
	return fmt.Errorf("%w: name %s is used by instance %s", store.ErrConflict, name, holder)
}

// UUIDHeld reports that uuid belongs to the instance named holder.
func UUIDHeld(uuid, holder string) error {
	return fmt.Errorf("%w: uuid %s is used by instance %s", store.ErrConflict, uuid, holder)
}

// AddrHeld reports that addr belongs to another instance, named by holder
// (its name, or its UUID when the name cannot be had).
func AddrHeld(addr, holder string) error {
	return fmt.Errorf("%w: address %s is used by instance %s", store.ErrConflict, addr, holder)
}

// Revision reports a failed compare-and-swap: expect was asked for, stored
// is the current revision (0 when the instance does not exist).
func Revision(expect, stored int64) error {
	switch {
	case expect == 0:
		return fmt.Errorf("%w: instance already exists (revision %d)", store.ErrConflict, stored)
	case stored == 0:
		return fmt.Errorf("%w: instance does not exist (expected revision %d)", store.ErrConflict, expect)
	default:
		return fmt.Errorf("%w: revision is %d, not %d", store.ErrConflict, stored, expect)
	}
}

// RecordVersion reports a failed compare-and-swap of a record: expect was
// asked for, stored is the record's version (0 when it does not exist).
// The caller adds the operation and key ("put record flavor/m1: ").
func RecordVersion(expect, stored int64) error {
	switch {
	case expect == 0:
		return fmt.Errorf("%w: record exists (version %d), expected none", store.ErrConflict, stored)
	case stored == 0:
		return fmt.Errorf("%w: record does not exist, expected version %d", store.ErrConflict, expect)
	default:
		return fmt.Errorf("%w: version is %d, expected %d", store.ErrConflict, stored, expect)
	}
}
