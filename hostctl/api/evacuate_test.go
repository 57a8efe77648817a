package api_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/hostctl/api"
	"github.com/vmeta/vmeta/hostctl/api/client"
	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/errkind"
)

// fakeEvacuations answers the evacuate route as host "b": another host
// is a bad request, a live owner a conflict.
type fakeEvacuations struct{ ownerAlive bool }

func (f *fakeEvacuations) Evacuate(_ context.Context, name, host string) (types.Evacuation, error) {
	switch {
	case host != "b":
		return types.Evacuation{}, errkind.Errorf(errkind.Invalid, "host %q: is not this host (b)", host)
	case f.ownerAlive:
		return types.Evacuation{}, errkind.Errorf(errkind.Conflict, "%s lives on a, whose heartbeat is fresh", name)
	}
	return types.Evacuation{Instance: name, Source: "a", Dest: host, State: "evacuated", Step: "started", OldSecrets: 2}, nil
}

// TestEvacuationAPI: the evacuate route is an administrator's; no host
// or another host is a 400, a live owner a 409; a daemon without
// evacuations answers 501.
func TestEvacuationAPI(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	c, _ := newController(t)
	tt := newTestTokens(t)
	fe := &fakeEvacuations{}
	srv := newTestServer(t, api.NewHandler(api.Services{Instances: c, Evacuations: fe}, log, tt.auth))
	root, alice := client.NewTCP(srv, tt.root), client.NewTCP(srv, tt.alice)
	if _, err := alice.Apply(ctx, []byte("name: a-1\n")); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		name   string
		who    *client.Client
		host   string
		alive  bool
		status int
		want   string
	}{
		{"a member may not evacuate", alice, "b", false, http.StatusForbidden, "administrator"},
		{"no host", root, "", false, http.StatusBadRequest, "host: required"},
		{"another host", root, "c", false, http.StatusBadRequest, "is not this host"},
		{"owner alive", root, "b", true, http.StatusConflict, "heartbeat is fresh"},
		{"evacuate", root, "b", false, http.StatusOK, "evacuated"},
	} {
		fe.ownerAlive = s.alive
		ev, err := s.who.Evacuate(ctx, "a-1", s.host)
		switch {
		case s.status == http.StatusOK && (err != nil || ev.State != s.want || ev.OldSecrets != 2):
			t.Errorf("%s: %+v, %v; want state %q", s.name, ev, err, s.want)
		case s.status != http.StatusOK && (status(err) != s.status || !strings.Contains(err.Error(), s.want)):
			t.Errorf("%s: %v; want %d naming %q", s.name, err, s.status, s.want)
		}
	}
	srv2 := newTestServer(t, api.NewHandler(api.Services{Instances: c}, log, tt.auth))
	if _, err := client.NewTCP(srv2, tt.root).Evacuate(ctx, "a-1", "b"); status(err) != http.StatusNotImplemented {
		t.Errorf("evacuate on a daemon without evacuations: %v, want 501", err)
	}
}
