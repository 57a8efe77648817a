package api_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/events"
)

func TestEvents(t *testing.T) {
	ctx := context.Background()
	audit := events.New(events.NewFiles(t.TempDir()), "host-a", nil)
	tt := newTestTokens(t)
	srv := httptest.NewServer(api.NewHandler(api.Services{Events: audit}, slog.New(slog.DiscardHandler), tt.auth))
	t.Cleanup(srv.Close)
	admin, member := client.NewTCP(srv.URL, tt.root), client.NewTCP(srv.URL, tt.alice)

	first, err := audit.Emit(ctx, "devices", "device.burned", map[string]string{"address": "0000:81:00.0"})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := admin.Events(ctx, "devices", "", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].ID != first.ID || evs[0].Type != "device.burned" || !jsonEqual(evs[0].Payload, `{"address":"0000:81:00.0"}`) {
		t.Fatalf("events %+v", evs)
	}

	// A follower blocked in a long poll gets the next event.
	got := make(chan types.Event, 1)
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- admin.Follow(fctx, "devices", first.ID, func(ev types.Event) error {
			got <- ev
			stop()
			return nil
		})
	}()
	if _, err := audit.Emit(ctx, "devices", "device.cleaned", nil); err != nil {
		t.Fatal(err)
	}
	if ev := <-got; ev.Type != "device.cleaned" {
		t.Fatalf("followed %+v", ev)
	}
	if err := <-done; err != nil {
		t.Fatalf("follow: %v", err)
	}

	for _, c := range []struct {
		name   string
		cl     *client.Client
		stream string
		after  string
		wait   time.Duration
		status int
	}{
		{"member", member, "devices", "", 0, http.StatusForbidden},
		{"bad stream", admin, "Dev!ces", "", 0, http.StatusBadRequest},
		{"bad after", admin, "devices", "x1", 0, http.StatusBadRequest},
		{"wait too long", admin, "devices", "", 2 * api.MaxEventWait, http.StatusBadRequest},
	} {
		if _, err := c.cl.Events(ctx, c.stream, c.after, 0, c.wait); status(err) != c.status {
			t.Errorf("%s: %v, want status %d", c.name, err, c.status)
		}
	}
}

func jsonEqual(got []byte, want string) bool {
	var a, b any
	return json.Unmarshal(got, &a) == nil && json.Unmarshal([]byte(want), &b) == nil && reflect.DeepEqual(a, b)
}
