package migrate

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/hosts"
	"github.com/vmeta/vmeta/internal/errkind"
)

// channelHost is one host's channel over w's store, serving on loopback.
func channelHost(t *testing.T, w *world, host string, local Destination) *Channel {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	id, err := LoadIdentity(t.TempDir(), host, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	st := w.st.(ChannelStore)
	b := &hosts.Beater{Store: st, Host: host, Log: slog.New(slog.DiscardHandler)}
	if err := b.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	c := &Channel{Store: st, ID: id, Local: local, Moves: w.st, Log: slog.New(slog.DiscardHandler)}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := Publish(ctx, st, id, l.Addr().String(), time.Now()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve %s: %v", host, err)
		}
	})
	return c
}

// TestMoveOverChannel: a move, its revert, and another move and its
// confirm, host a driving host b over the real mutual-TLS channel.
func TestMoveOverChannel(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	a := channelHost(t, w, "a", nil)
	channelHost(t, w, "b", &fakeDest{w})
	m := w.migrator()
	m.Hosts = a
	if _, err := m.Migrate(ctx, "vm", "b"); err != nil {
		t.Fatal(err)
	}
	if w.state() != inVerify {
		t.Fatalf("in verify: %s", w.state())
	}
	if _, err := m.Revert(ctx, "vm"); err != nil {
		t.Fatal(err)
	}
	if w.state() != reverted {
		t.Fatalf("reverted: %s", w.state())
	}
	if _, err := m.Migrate(ctx, "vm", "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Confirm(ctx, "vm"); err != nil {
		t.Fatal(err)
	}
	if w.state() != confirmed {
		t.Fatalf("confirmed: %s", w.state())
	}
}

// TestChannelRefuses: a request the store does not back is refused with
// its kind, and nothing changes on the destination.
func TestChannelRefuses(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	a := channelHost(t, w, "a", nil)
	b := channelHost(t, w, "b", &fakeDest{w})
	st := w.st.(ChannelStore)
	rec, err := put(ctx, w.st, Record{Instance: "vm", UUID: uuid, Source: "a", Dest: "b", State: Migrating})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(c *Channel) error {
		d, err := c.Destination(ctx, "b")
		if err != nil {
			return err
		}
		return d.TakeOver(ctx, rec)
	}
	expect := func(what string, err error, kind errkind.Kind, words string) {
		t.Helper()
		if err == nil || errkind.Of(err) != kind || !strings.Contains(err.Error(), words) {
			t.Errorf("%s: %v (kind %v), want %v naming %q", what, err, errkind.Of(err), kind, words)
		}
	}

	// A client certificate the store does not publish: another key
	// naming host a.
	rogue, err := LoadIdentity(t.TempDir(), "a", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	expect("a certificate the store does not publish", ask(&Channel{Store: st, ID: rogue, Moves: w.st}), errkind.Unavailable, "certificate")

	// An expired certificate, published: refused all the same.
	old, err := LoadIdentity(t.TempDir(), "c", time.Now().Add(-2*certLife))
	if err != nil {
		t.Fatal(err)
	}
	if err := (&hosts.Beater{Store: st, Host: "c", Log: slog.New(slog.DiscardHandler)}).Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := Publish(ctx, st, old, "127.0.0.1:1", time.Now()); err != nil {
		t.Fatal(err)
	}
	expect("an expired certificate", ask(&Channel{Store: st, ID: old, Moves: w.st}), errkind.Unavailable, "certificate")

	// The move's source is a, not b: b asking itself is refused by the
	// record.
	expect("a host the record does not name", ask(b), errkind.Forbidden, "moves from a to b, not from b to b")

	// A state that does not call for the request.
	rec.State = Verify
	if rec, err = put(ctx, w.st, rec); err != nil {
		t.Fatal(err)
	}
	expect("a request in the wrong state", ask(a), errkind.Conflict, "is verify, not migrating")

	// A server whose certificate is not the one published for b.
	// b's record names another certificate at b's real address.
	cr, _ := channelOf(ctx, st, "b")
	rogueB := *rogue
	rogueB.Host = "b"
	if err := Publish(ctx, st, &rogueB, cr.Address, time.Now()); err != nil {
		t.Fatal(err)
	}
	expect("a server certificate the store does not publish", ask(a), errkind.Unavailable, "not the one the store publishes for host b")

	// Unknown and down hosts.
	_, err = a.Destination(ctx, "nosuch")
	expect("an unknown host", err, errkind.Invalid, "no such host")
	a.Now = func() time.Time { return time.Now().Add(time.Hour) }
	_, err = a.Destination(ctx, "b")
	expect("a down host", err, errkind.Unavailable, "heartbeat is stale")
	if w.owner != "a" || w.calls["take-over"] != 0 {
		t.Fatalf("a refused request reached the destination: owner %s, %d take-overs", w.owner, w.calls["take-over"])
	}
	if errors.Is(err, ErrForbidden) {
		t.Fatal("kinds mixed up")
	}
}
