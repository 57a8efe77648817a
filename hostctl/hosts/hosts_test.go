package hosts_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/hosts"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/bolt"
	"github.com/vmeta/vmeta/internal/testenv/stores"
)

func TestResolveKeepsFirstName(t *testing.T) {
	dir := t.TempDir()
	name, err := hosts.Resolve(dir, "host-a")
	if err != nil || name != "host-a" {
		t.Fatalf("first start: %q %v", name, err)
	}
	// Later starts without --host get the stored name, whatever the
	// machine is called now.
	if name, err := hosts.Resolve(dir, ""); err != nil || name != "host-a" {
		t.Fatalf("second start: %q %v", name, err)
	}
	if name, err := hosts.Resolve(dir, "host-a"); err != nil || name != "host-a" {
		t.Fatalf("same --host: %q %v", name, err)
	}
	_, err = hosts.Resolve(dir, "host-b")
	if err == nil || !strings.Contains(err.Error(), `belongs to host "host-a"`) || !strings.Contains(err.Error(), `"host-b"`) {
		t.Fatalf("other --host: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, hosts.NameFile)); string(b) != "host-a\n" {
		t.Fatalf("name file = %q", b)
	}
}

func TestResolveDefaultsToHostname(t *testing.T) {
	h, err := os.Hostname()
	if err != nil {
		t.Skipf("no host name on this machine: %v", err)
	}
	name, err := hosts.Resolve(t.TempDir(), "")
	if err != nil {
		if hosts.CheckName(strings.ToLower(h)) != nil {
			return // the machine's name is not usable; Resolve said so
		}
		t.Fatal(err)
	}
	if name != strings.ToLower(h) {
		t.Fatalf("name = %q, want %q", name, strings.ToLower(h))
	}
}

func TestResolveConcurrentFirstStarts(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	names := make([]string, 8)
	errs := make([]error, 8)
	for i := range names {
		wg.Add(1)
		go func() { defer wg.Done(); names[i], errs[i] = hosts.Resolve(dir, "") }()
	}
	wg.Wait()
	for i := range names {
		if errs[i] != nil || names[i] != names[0] {
			t.Fatalf("start %d: %q %v (first %q)", i, names[i], errs[i], names[0])
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		name, want string
	}{
		{"host-a", ""},
		{"h1.example", ""},
		{"0", ""},
		{"", "empty"},
		{"Host", `character "H"`},
		{"a_b", `character "_"`},
		{"a/b", `character "/"`},
		{"-a", "start and end"},
		{"a.", "start and end"},
		{strings.Repeat("a", 254), "longer than 253"},
	} {
		err := hosts.CheckName(tc.name)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func openBolt(t *testing.T) *bolt.Store {
	t.Helper()
	st := stores.Bolt(t)
	return st
}

func TestHeartbeatLiveness(t *testing.T) {
	ctx := context.Background()
	st := openBolt(t)
	clk := &clock{t: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	n := 3
	a := &hosts.Beater{Store: st, Host: "host-a", Version: "v1", Now: clk.now,
		Count: func(context.Context) (int, error) { return n, nil }}
	b := &hosts.Beater{Store: st, Host: "host-b", Version: "v1", Now: clk.now}
	for _, bt := range []*hosts.Beater{a, b} {
		if err := bt.Beat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	const downAfter = time.Minute
	list, err := hosts.List(ctx, st, clk.now(), downAfter)
	if err != nil || len(list) != 2 || list[0].Host != "host-a" || list[1].Host != "host-b" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if list[0].Down || list[0].Instances != 3 || list[0].Version != "v1" {
		t.Fatalf("host-a = %+v", list[0])
	}

	// host-b goes silent; host-a keeps beating.
	clk.advance(50 * time.Second)
	n = 4
	if err := a.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	clk.advance(20 * time.Second)
	sa, err := hosts.Get(ctx, st, "host-a", clk.now(), downAfter)
	if err != nil || sa.Down || sa.Instances != 4 || sa.Age != 20*time.Second {
		t.Fatalf("host-a after beat: %+v %v", sa, err)
	}
	sb, err := hosts.Get(ctx, st, "host-b", clk.now(), downAfter)
	if err != nil || !sb.Down || sb.Age != 70*time.Second {
		t.Fatalf("host-b silent 70s: %+v %v", sb, err)
	}
	if !sb.Started.Equal(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)) {
		t.Fatalf("started = %v", sb.Started)
	}

	// A clean stop is down at once.
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if sa, _ := hosts.Get(ctx, st, "host-a", clk.now(), downAfter); !sa.Down || !sa.Stopped {
		t.Fatalf("stopped host-a: %+v", sa)
	}
	if _, err := hosts.Get(ctx, st, "host-c", clk.now(), downAfter); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown host: %v", err)
	}
}

// conflictingStore makes the first n writes conflict, as a store does
// when another writer got in between the read and the write.
type conflictingStore struct {
	*bolt.Store
	n int
}

func (s *conflictingStore) PutRecord(ctx context.Context, key string, value []byte, expect int64) (store.Record, error) {
	if s.n > 0 {
		s.n--
		return store.Record{}, store.ErrConflict
	}
	return s.Store.PutRecord(ctx, key, value, expect)
}

// TestHeartbeatRetriesLikeEveryCAS: a beat's compare-and-swap loop is
// the store's one (store.Update, store.MaxCASAttempts): conflicts short
// of the bound are retried, and one past it is ErrConflict naming the
// host.
func TestHeartbeatRetriesLikeEveryCAS(t *testing.T) {
	ctx := context.Background()
	st := &conflictingStore{Store: openBolt(t), n: 20}
	b := &hosts.Beater{Store: st, Host: "h1", Version: "test"}
	if err := b.Beat(ctx); err != nil {
		t.Fatalf("20 conflicts: %v", err)
	}
	st.n = store.MaxCASAttempts
	err := b.Beat(ctx)
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "--host h1") {
		t.Fatalf("conflicts past the bound: %v", err)
	}
}
