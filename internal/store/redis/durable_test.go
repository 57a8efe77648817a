package redis

import (
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
)

// The durability options come out of the URL (go-redis would refuse
// them), with the scheme's default when absent; bad values are refused
// without showing a password.
func TestParseDurability(t *testing.T) {
	for _, tc := range []struct {
		url      string
		def      int
		set      durability
		clientOK func(goredis.UniversalClient) bool
	}{
		{url: "redis://h:1/0", def: 0, set: durability{minReplicas: -1}},
		{url: "redis://h:1/0?min_replicas=2&replica_timeout=250ms&read_timeout=5s", def: 0,
			set: durability{minReplicas: 2, timeout: 250 * time.Millisecond},
			clientOK: func(c goredis.UniversalClient) bool {
				return c.(*goredis.Client).Options().ReadTimeout == 5*time.Second
			}},
		{url: "redis+sentinel://m@s1/0", def: 1, set: durability{minReplicas: -1}},
		{url: "redis+sentinel://m@s1/0?min_replicas=0", def: 1, set: durability{minReplicas: 0}},
		{url: "redis+cluster://h1,h2?replica_timeout=1s&min_replicas=1", def: 0,
			set: durability{minReplicas: 1, timeout: time.Second}},
		{url: "unix:///run/redis.sock?db=2&min_replicas=1", def: 0, set: durability{minReplicas: 1},
			clientOK: func(c goredis.UniversalClient) bool { return c.(*goredis.Client).Options().DB == 2 }},
	} {
		tg, err := parseTarget(tc.url)
		if err != nil {
			t.Errorf("parseTarget(%s): %v", tc.url, err)
			continue
		}
		if tg.defaultReplicas != tc.def || tg.replicas != tc.set {
			t.Errorf("parseTarget(%s): default %d, set %+v; want %d, %+v", tc.url, tg.defaultReplicas, tg.replicas, tc.def, tc.set)
		}
		c := tg.newClient()
		if tc.clientOK != nil && !tc.clientOK(c) {
			t.Errorf("parseTarget(%s): the other options were not kept", tc.url)
		}
		c.Close()
	}
	for _, bad := range []string{
		"redis://u:secret@h:1/0?min_replicas=-1",
		"redis://u:secret@h:1/0?min_replicas=one",
		"redis://u:secret@h:1/0?replica_timeout=0s",
		"redis+sentinel://u:secret@m@h/0?replica_timeout=2",
	} {
		_, err := parseTarget(bad)
		if err == nil || strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), "replica") {
			t.Errorf("parseTarget(%s) = %v, want an error naming the option, without the password", bad, err)
		}
	}
}

// The URL overrides WithReplicas, which overrides the scheme's default.
func TestReplicasPrecedence(t *testing.T) {
	url := testenv.StartRedis(t)
	for _, tc := range []struct {
		url     string
		opts    []Option
		n       int
		timeout time.Duration
	}{
		{url, nil, 0, DefaultReplicaTimeout},
		{url, []Option{WithReplicas(1, time.Second)}, 1, time.Second},
		{url + "?min_replicas=0", []Option{WithReplicas(1, time.Second)}, 0, time.Second},
		{url + "?replica_timeout=3s", []Option{WithReplicas(2, 0)}, 2, 3 * time.Second},
	} {
		s, err := Open(t.Context(), tc.url, tc.opts...)
		if err != nil {
			t.Fatalf("Open(%s): %v", tc.url, err)
		}
		if n, timeout := s.Replicas(); n != tc.n || timeout != tc.timeout {
			t.Errorf("Open(%s): Replicas() = %d, %s; want %d, %s", tc.url, n, timeout, tc.n, tc.timeout)
		}
		s.Close()
	}
}

// A server without replicas cannot acknowledge: every kind of write fails
// with ErrNotDurable, yet was applied; refused writes do not wait.
func TestNotDurable(t *testing.T) {
	s := openFlushed(t, testenv.StartRedis(t)+"?min_replicas=1&replica_timeout=20ms")
	defer s.Close()
	ctx := t.Context()
	wantNotDurable := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrNotDurable) || !strings.Contains(err.Error(), "acknowledged by 0 of 1 replica within 20ms") {
			t.Errorf("%s: %v, want ErrNotDurable", what, err)
		}
	}
	in := store.Instance{Name: "vm", UUID: "u-1", Addresses: []string{"10.0.0.1"}, Spec: []byte(`{}`)}
	_, _, err := s.Put(ctx, in, store.Document{Tree: []byte("t")}, 0)
	wantNotDurable("Put", err)
	if got, err := s.Instance(ctx, "vm"); err != nil || got.Revision != 1 {
		t.Errorf("Instance after a not durable Put = %+v, %v; want it written", got, err)
	}
	if uuid, err := s.LookupAddress(ctx, "10.0.0.1"); err != nil || uuid != "u-1" {
		t.Errorf("LookupAddress = %q, %v", uuid, err)
	}
	// A conflict changed nothing: no waiting, the conflict is the error.
	if _, _, err := s.Put(ctx, in, store.Document{}, 0); !errors.Is(err, store.ErrConflict) || errors.Is(err, ErrNotDurable) {
		t.Errorf("Put with a stale revision: %v, want ErrConflict only", err)
	}
	// Moving to another address releases the old one after the write.
	in.Addresses = []string{"10.0.0.2"}
	_, _, err = s.Put(ctx, in, store.Document{Tree: []byte("t2")}, 1)
	wantNotDurable("Put with a new address", err)
	if _, err := s.LookupAddress(ctx, "10.0.0.1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("old address after the move: %v, want not found", err)
	}
	if locked, err := s.rdb.Exists(ctx, lockKey("u-1")).Result(); err != nil || locked != 0 {
		t.Errorf("lock left after a not durable Put: %d, %v", locked, err)
	}

	wantNotDurable("PutSecret", s.PutSecret(ctx, "u-1", "disk", store.WrappedSecret{KeyID: "k"}))
	if _, err := s.GetSecret(ctx, "u-1", "disk"); err != nil {
		t.Errorf("GetSecret: %v", err)
	}
	wantNotDurable("DeleteSecret", s.DeleteSecret(ctx, "u-1", "disk"))
	if err := s.DeleteSecret(ctx, "u-1", "disk"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteSecret of a deleted secret: %v", err)
	}
	wantNotDurable("SetPassword", s.SetPassword(ctx, "u-1", []byte("pw")))
	if err := s.SetPassword(ctx, "u-1", []byte("pw")); !errors.Is(err, store.ErrConflict) {
		t.Errorf("second SetPassword: %v, want ErrConflict", err)
	}

	_, err = s.PutRecord(ctx, "hosts/a", []byte("v"), 0)
	wantNotDurable("PutRecord", err)
	if rec, err := s.Record(ctx, "hosts/a"); err != nil || rec.Version != 1 {
		t.Errorf("Record = %+v, %v", rec, err)
	}
	if _, err := s.PutRecord(ctx, "hosts/a", []byte("v"), 0); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutRecord with a stale version: %v, want ErrConflict", err)
	}
	wantNotDurable("DeleteRecord", s.DeleteRecord(ctx, "hosts/a", 1))

	wantNotDurable("Delete", s.Delete(ctx, "vm"))
	if _, err := s.Instance(ctx, "vm"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Instance after Delete: %v", err)
	}
}

// On a cluster the WAIT goes to the primary of the key written (a wrong
// node would answer MOVED to the write itself); a claim that is not
// acknowledged aborts the Put.
func TestNotDurableCluster(t *testing.T) {
	s := openFlushed(t, testenv.ClusterURL(testenv.StartRedisCluster(t)), WithReplicas(1, 20*time.Millisecond))
	defer s.Close()
	ctx := t.Context()
	for _, key := range []string{"a", "b", "c", "d", "e", "f"} { // several slots, on every node
		if _, err := s.PutRecord(ctx, key, []byte("v"), -1); !errors.Is(err, ErrNotDurable) {
			t.Errorf("PutRecord(%s): %v, want ErrNotDurable", key, err)
		}
	}
	in := store.Instance{Name: "vm", UUID: "u-1", Addresses: []string{"10.0.0.1"}, Spec: []byte(`{}`)}
	if _, _, err := s.Put(ctx, in, store.Document{}, 0); !errors.Is(err, ErrNotDurable) || !strings.Contains(err.Error(), "claim name vm") {
		t.Errorf("Put: %v, want ErrNotDurable from the name claim", err)
	}
	if _, err := s.LookupAddress(ctx, "10.0.0.1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LookupAddress after an aborted Put: %v", err)
	}
}
