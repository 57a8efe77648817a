package shares

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/vmeta/vmeta/internal/errkind"
	"github.com/vmeta/vmeta/internal/store"
)

// Records is what the shares need from the store.
type Records interface {
	store.Records
}

// loadShare reads the share with id.
func loadShare(ctx context.Context, st Records, id string) (Share, error) {
	rec, err := st.Record(ctx, shareKey(id))
	if errors.Is(err, store.ErrNotFound) {
		return Share{}, fmt.Errorf("share %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return Share{}, fmt.Errorf("share %s: %w", id, err)
	}
	var sh Share
	if err := json.Unmarshal(rec.Value, &sh); err != nil {
		return Share{}, fmt.Errorf("share %s: decode record: %w", id, err)
	}
	sh.version = rec.Version
	return sh, nil
}

// putShare writes sh expecting its version (0: it must not exist).
func putShare(ctx context.Context, st Records, sh *Share) error {
	b, err := json.Marshal(sh)
	if err != nil {
		return err
	}
	rec, err := st.PutRecord(ctx, shareKey(sh.ID), b, sh.version)
	if err != nil {
		return fmt.Errorf("share %s: %w", sh.ID, err)
	}
	sh.version = rec.Version
	return nil
}

func listShares(ctx context.Context, st Records) ([]Share, error) {
	recs, err := st.Records(ctx, sharePrefix)
	if err != nil {
		return nil, fmt.Errorf("list shares: %w", err)
	}
	out := make([]Share, 0, len(recs))
	for _, rec := range recs {
		var sh Share
		if err := json.Unmarshal(rec.Value, &sh); err != nil {
			return nil, fmt.Errorf("share record %s: %w", rec.Key, err)
		}
		sh.version = rec.Version
		out = append(out, sh)
	}
	return out, nil
}

// updateShare applies change to the share with id and writes it with a
// version check, retrying on a conflict with a fresh read (another host
// changed another holder; store.RetryConflicts). change returns false to
// leave the record as it is.
func updateShare(ctx context.Context, st Records, id string, change func(*Share) (bool, error)) (Share, error) {
	var out Share
	err := store.RetryConflicts(ctx, "share "+id, func() error {
		sh, err := loadShare(ctx, st, id)
		if err != nil {
			return store.Final(err)
		}
		ok, err := change(&sh)
		if err != nil || !ok {
			out = sh
			return store.Final(err)
		}
		switch err = putShare(ctx, st, &sh); {
		case err == nil:
			out = sh
		case errors.Is(err, store.ErrNotFound):
			// Deleted since read: read again (and find it gone).
			return fmt.Errorf("%w: %w", store.ErrConflict, err)
		}
		return err
	})
	return out, err // out: the share as changed, or as read when change refused
}

// lock adds h to the share's holders (idempotent).
func lock(ctx context.Context, st Records, id string, h Holder) (Share, error) {
	return updateShare(ctx, st, id, func(sh *Share) (bool, error) {
		if slices.ContainsFunc(sh.Holders, func(x Holder) bool { return x.Instance == h.Instance }) {
			return false, nil
		}
		sh.Holders = append(sh.Holders, h)
		return true, nil
	})
}

// unlock removes instance from the share's holders (idempotent; a share
// that no longer exists has nothing to unlock).
func unlock(ctx context.Context, st Records, id, instance string) (Share, error) {
	sh, err := updateShare(ctx, st, id, func(sh *Share) (bool, error) {
		n := len(sh.Holders)
		sh.Holders = slices.DeleteFunc(sh.Holders, func(x Holder) bool { return x.Instance == instance })
		return len(sh.Holders) != n, nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return Share{}, nil
	}
	return sh, err
}

// loadMapping reads one mapping.
func loadMapping(ctx context.Context, st Records, instance, share string) (Mapping, error) {
	rec, err := st.Record(ctx, mappingKey(instance, share))
	if err != nil {
		return Mapping{}, fmt.Errorf("share %s on instance %s: %w", share, instance, err)
	}
	return decodeMapping(rec)
}

func decodeMapping(rec store.Record) (Mapping, error) {
	var m Mapping
	if err := json.Unmarshal(rec.Value, &m); err != nil {
		return Mapping{}, fmt.Errorf("share mapping %s: decode: %w", rec.Key, err)
	}
	m.version = rec.Version
	return m, nil
}

// mappings lists the mappings of one instance ("" for every instance's).
func mappings(ctx context.Context, st Records, instance string) ([]Mapping, error) {
	prefix := mappingPrefix
	if instance != "" {
		prefix += instance + "/"
	}
	recs, err := st.Records(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("list share mappings: %w", err)
	}
	out := make([]Mapping, 0, len(recs))
	for _, rec := range recs {
		m, err := decodeMapping(rec)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// createMapping writes a new mapping (status attaching): it must not
// exist, so the same share is never attached twice to one instance.
func createMapping(ctx context.Context, st Records, m *Mapping) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	rec, err := st.PutRecord(ctx, mappingKey(m.Instance, m.ShareID), b, 0)
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("%w: share %s is already attached to instance %s (a share is attached at most once to an instance)", store.ErrConflict, m.ShareID, m.InstanceName)
	}
	if err != nil {
		return fmt.Errorf("%v: %w", m, err)
	}
	m.version = rec.Version
	return nil
}

// ErrTransition wraps a refused status change: the mapping is not in a
// status the change starts from (or another process moved it first).
var ErrTransition = errkind.New(errkind.Conflict, "share mapping status changed")

// transition moves m from one of the statuses from to status to, in one
// write expecting m's version: of two processes moving the same mapping
// only one succeeds, the other gets ErrConflict (and ErrTransition). On
// success m is the stored mapping.
func transition(ctx context.Context, st Records, m *Mapping, to, reason string, from ...string) error {
	if !slices.Contains(from, m.Status) {
		return fmt.Errorf("%w: %w: %v is %s, not %s", store.ErrConflict, ErrTransition, m, m.Status, strings.Join(from, " or "))
	}
	next := *m
	next.Status, next.Error = to, reason
	next.Updated = now()
	b, err := json.Marshal(next)
	if err != nil {
		return err
	}
	rec, err := st.PutRecord(ctx, mappingKey(m.Instance, m.ShareID), b, m.version)
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("%w: %v: moved by another process (from %s): %w", ErrTransition, m, m.Status, err)
	}
	if err != nil {
		return fmt.Errorf("%v: %s -> %s: %w", m, m.Status, to, err)
	}
	next.version = rec.Version
	*m = next
	return nil
}

// deleteMapping removes m (the end of detaching), expecting its version.
func deleteMapping(ctx context.Context, st Records, m Mapping) error {
	err := st.DeleteRecord(ctx, mappingKey(m.Instance, m.ShareID), m.version)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%v: remove mapping: %w", m, err)
	}
	return nil
}

// rehost records that m's instance now lives on host (it was adopted),
// in one write expecting m's version.
func rehost(ctx context.Context, st Records, m *Mapping, host string) error {
	next := *m
	next.Host, next.Updated = host, now()
	b, err := json.Marshal(next)
	if err != nil {
		return err
	}
	rec, err := st.PutRecord(ctx, mappingKey(m.Instance, m.ShareID), b, m.version)
	if err != nil {
		return fmt.Errorf("%v: record host %s: %w", m, host, err)
	}
	next.version = rec.Version
	*m = next
	return nil
}
