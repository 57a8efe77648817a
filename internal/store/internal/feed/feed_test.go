package feed

import (
	"context"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/store"
)

func recv(t *testing.T, ch <-chan store.Change) (store.Change, bool) {
	t.Helper()
	select {
	case c, ok := <-ch:
		return c, ok
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received")
		return store.Change{}, false
	}
}

func TestSendInOrder(t *testing.T) {
	s := New(t.Context(), 4, nil)
	defer s.Close()
	for v := range int64(4) {
		s.Send(store.Change{UUID: "u", Version: v + 1})
	}
	for v := range int64(4) {
		if c, _ := recv(t, s.C()); c.Version != v+1 || c.Resync {
			t.Fatalf("change %d = %+v", v, c)
		}
	}
}

func TestOverflowOwesOneResync(t *testing.T) {
	s := New(t.Context(), 2, nil)
	defer s.Close()
	for v := range int64(10) { // 8 dropped
		s.Send(store.Change{UUID: "u", Version: v + 1})
	}
	for want := range int64(2) {
		if c, _ := recv(t, s.C()); c.Version != want+1 {
			t.Fatalf("got %+v, want version %d", c, want+1)
		}
	}
	if c, _ := recv(t, s.C()); !c.Resync {
		t.Fatalf("got %+v, want a resync", c)
	}
	// Owed once, not once per dropped change.
	s.Send(store.Change{UUID: "u", Version: 11})
	if c, _ := recv(t, s.C()); c.Version != 11 {
		t.Fatalf("got %+v, want version 11", c)
	}
}

func TestResyncWithRoom(t *testing.T) {
	s := New(t.Context(), 2, nil)
	defer s.Close()
	s.Resync()
	if c, _ := recv(t, s.C()); !c.Resync || c.UUID != "" {
		t.Fatalf("got %+v", c)
	}
}

func TestCloseAndCancel(t *testing.T) {
	for _, how := range []string{"close", "cancel"} {
		ctx, cancel := context.WithCancel(t.Context())
		closed := make(chan struct{})
		s := New(ctx, 2, func() { close(closed) })
		s.Send(store.Change{UUID: "u", Version: 1})
		if how == "close" {
			s.Close()
			s.Close() // idempotent
		} else {
			cancel()
		}
		<-closed
		<-s.Done()
		// Buffered changes may still be read; then the channel is closed.
		for {
			if _, ok := recv(t, s.C()); !ok {
				break
			}
		}
		s.Send(store.Change{UUID: "u", Version: 2}) // no panic after close
		s.Resync()
		cancel()
	}
}
