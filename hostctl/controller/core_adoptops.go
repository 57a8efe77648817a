package controller

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/store"
)

// Host ownership as the adopt and the forced delete of another host's
// instance (hostctl/ops, adopt.go and forcedelete.go) ask it of the core
// (hosts.go): whose the record is, whether its owner is alive, the
// record's host field changed in one compare-and-swap or the record
// dropped, and the parts' phases for a stored instance of any host.

// Owns reports whether rec is this host's to manage (a record without a
// host is anyone's).
func (c *Controller) Owns(rec store.Instance) bool { return c.owns(rec) }

// OwnerDown returns nil when rec's host is down, else ErrOwnerAlive; what
// names the refused operation ("adopt web-1").
func (c *Controller) OwnerDown(ctx context.Context, what string, rec store.Instance) error {
	if rec.Host == "" {
		return nil
	}
	if c.hosts == nil {
		return fmt.Errorf("%s: %w: this hostctl does not track hosts, so it cannot tell whether %s is down", what, ErrOwnerAlive, rec.Host)
	}
	down, why, err := c.hosts.HostDown(ctx, rec.Host)
	if err != nil {
		return fmt.Errorf("%s: owner %s: %w", what, rec.Host, err)
	}
	if !down {
		return fmt.Errorf("%s: %w: %s lives on %s, whose heartbeat is fresh (%s)", what, ErrOwnerAlive, rec.Name, rec.Host, why)
	}
	return nil
}

// TakeOver makes this host the owner of rec, read at rec.Revision: one
// compare-and-swap of its record (store.ErrConflict when it changed
// since, so of two hosts taking it over at once exactly one wins); the
// metadata's readers are told. It returns the record as written.
func (c *Controller) TakeOver(ctx context.Context, rec store.Instance) (store.Instance, error) {
	doc, err := c.store.Document(ctx, rec.UUID)
	if err != nil {
		return store.Instance{}, err
	}
	rec.Host = c.hostName
	if _, _, err := c.store.Put(ctx, rec, doc, rec.Revision); err != nil {
		return store.Instance{}, err
	}
	if c.notify != nil {
		c.notify.Invalidate(rec.UUID)
	}
	return rec, nil
}

// Forget removes rec, another host's instance, from the store (its
// record and published metadata), touching nothing on any host; the parts
// that act on a forced delete run AfterDelete for its owner, and the
// metadata's readers are told.
func (c *Controller) Forget(ctx context.Context, rec store.Instance) error {
	if err := c.store.Delete(ctx, rec.Name); err != nil {
		return err
	}
	c.afterStoredParts(ctx, "delete", rec, part.ForceDelete) // parts.go
	if c.notify != nil {
		c.notify.Invalidate(rec.UUID)
	}
	return nil
}

// CheckRecordParts lets the parts that act on op check rec, a stored
// instance of any host (a refusal wraps ErrState).
func (c *Controller) CheckRecordParts(ctx context.Context, op part.Op, rec store.Instance) error {
	return c.checkRecordParts(ctx, op, rec) // parts.go
}

// CommittedRecordParts tells the parts that act on op that op on rec, a
// stored instance of any host, stands, and returns their notes.
func (c *Controller) CommittedRecordParts(ctx context.Context, op part.Op, rec store.Instance) []string {
	in, err := decodeSpec(rec)
	if err != nil {
		c.log.Warn("parts not told that "+string(op)+" stands", "instance", rec.Name, "err", err)
		return nil
	}
	return c.committedParts(ctx, op, in, rec.Host) // partphases.go
}

// EnsureDrive rebuilds rec's config drive from its published document
// when the file is missing (an instance without one has none).
func (c *Controller) EnsureDrive(ctx context.Context, rec store.Instance) error {
	return c.ensureDrive(ctx, rec) // power.go
}
