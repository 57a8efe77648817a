package hosts_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/vmeta/vmeta/hostctl/hosts"
	"github.com/vmeta/vmeta/internal/store"
)

// TestCount: the heartbeat's count is the instances a host owns by the
// ownership rule (Owns): its own records and those that name no host
// (written before hosts were tracked); every record when hosts are not
// tracked. A record whose spec does not decode counts too.
func TestCount(t *testing.T) {
	ctx := context.Background()
	st := openBolt(t)
	for i, r := range []struct{ name, host, spec string }{
		{"a-1", "host-a", `{"name": "a-1"}`},
		{"a-broken", "host-a", `{"name": 7}`},
		{"b-1", "host-b", `{"name": "b-1"}`},
		{"old-1", "", `{"name": "old-1"}`},
	} {
		rec := store.Instance{Name: r.name, UUID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), Host: r.host, Spec: []byte(r.spec)}
		if _, _, err := st.Put(ctx, rec, store.Document{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	for host, want := range map[string]int{"host-a": 3, "host-b": 2, "host-c": 1, "": 4} {
		if n, err := hosts.Count(ctx, st, host); n != want || err != nil {
			t.Errorf("Count(%q) = %d, %v; want %d", host, n, err, want)
		}
	}
	boom := errors.New("store down")
	if _, err := hosts.Count(ctx, failingInstances{boom}, "host-a"); !errors.Is(err, boom) {
		t.Errorf("Count over a failing store: %v, want it wrapped", err)
	}
}

func TestOwns(t *testing.T) {
	for _, tc := range []struct {
		host, owner string
		want        bool
	}{
		{"host-a", "host-a", true},
		{"host-a", "host-b", false},
		{"host-a", "", true}, // written before hosts were tracked
		{"", "host-b", true}, // hosts not tracked
	} {
		if got := hosts.Owns(tc.host, tc.owner); got != tc.want {
			t.Errorf("Owns(%q, %q) = %v, want %v", tc.host, tc.owner, got, tc.want)
		}
	}
}

type failingInstances struct{ err error }

func (f failingInstances) Instances(context.Context) ([]store.Instance, error) { return nil, f.err }
