package store

import (
	"context"
	"fmt"
)

// Groups is sets of versioned records that change together: every record
// of a group is written by one atomic, all-or-nothing compare-and-swap of
// any number of its records (one bolt transaction; one script on one Redis
// hash slot, the group's). It is what Records cannot do: "claim any free
// device of this host and record the claim" checks and writes several
// records at once.
//
// A group is named like a record key (CheckKey), its records' keys too;
// records in groups are apart from Records (Records does not list them).
// Keep a group to what one host changes together (a host's device
// inventory): on Redis the whole group lives on one node.
type Groups interface {
	// GroupRecords returns every record of group, sorted by key (a
	// consistent snapshot on both backends).
	GroupRecords(ctx context.Context, group string) ([]Record, error)
	// CommitGroup applies ops to group if, for every op, the stored
	// version of its key is the op's ExpectVersion (same rules as
	// PutRecord: 0 must not exist, > 0 exactly, < 0 any). On any mismatch
	// it returns ErrConflict naming the first key that did not match and
	// changes nothing. It returns the records as written, in the order of
	// ops (deleted ones with Version 0, checked ones with their version and
	// no value). A key may appear only once.
	CommitGroup(ctx context.Context, group string, ops []GroupOp) ([]Record, error)
}

// GroupOp is one write of CommitGroup.
type GroupOp struct {
	Key           string
	ExpectVersion int64
	// Value is the new value, unless Delete or Check.
	Value []byte
	// Delete removes the record, which must exist (a missing one is
	// ErrConflict); ExpectVersion 0 is refused.
	Delete bool
	// Check only compares the version, writing nothing.
	Check bool
}

// MaxGroupOps is the most ops one CommitGroup takes.
const MaxGroupOps = 256

// CheckGroupOps validates a CommitGroup call: the group name, each key,
// no key twice, at most MaxGroupOps ops, and a Delete that expects the
// record to exist.
func CheckGroupOps(group string, ops []GroupOp) error {
	if err := CheckKey(group); err != nil {
		return fmt.Errorf("group: %w", err)
	}
	if len(ops) == 0 || len(ops) > MaxGroupOps {
		return fmt.Errorf("group %s: %d ops, want 1 to %d", group, len(ops), MaxGroupOps)
	}
	seen := make(map[string]bool, len(ops))
	for i, op := range ops {
		if err := CheckKey(op.Key); err != nil {
			return fmt.Errorf("group %s op %d: %w", group, i, err)
		}
		if seen[op.Key] {
			return fmt.Errorf("group %s op %d: key %s appears twice", group, i, op.Key)
		}
		seen[op.Key] = true
		if op.Delete && op.Check {
			return fmt.Errorf("group %s op %d (%s): both Delete and Check", group, i, op.Key)
		}
		if op.Delete && op.ExpectVersion == 0 {
			return fmt.Errorf("group %s op %d (%s): Delete expecting no record", group, i, op.Key)
		}
	}
	return nil
}
