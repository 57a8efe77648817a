package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/storetest"
	"github.com/vmeta/vmeta/internal/testenv"
)

// openFlushed opens the store at url and empties it (every primary of a
// cluster).
func openFlushed(t testing.TB, url string, opts ...Option) *Store {
	t.Helper()
	s, err := Open(t.Context(), url, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := flush(t.Context(), s); err != nil {
		s.Close()
		t.Fatalf("FLUSHDB: %v", err)
	}
	return s
}

func flush(ctx context.Context, s *Store) error {
	if c, ok := s.rdb.(*goredis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
			return n.FlushDB(ctx).Err()
		})
	}
	return s.rdb.FlushDB(ctx).Err()
}

// openPeer opens a second client of the store at url, closed when the test
// ends.
func openPeer(t testing.TB, url string) *Store {
	t.Helper()
	s, err := Open(t.Context(), url)
	if err != nil {
		t.Fatalf("Open (peer): %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func conformance(t *testing.T, url string) {
	storetest.Run(t,
		func(t *testing.T) store.Store { return openFlushed(t, url) },
		storetest.WithPeer(func(t *testing.T, _ store.Store) store.Store { return openPeer(t, url) }))
}

func TestConformance(t *testing.T) {
	conformance(t, testenv.StartRedis(t))
}

// The same code on a real three-node Redis Cluster: every script touches
// one slot.
func TestConformanceCluster(t *testing.T) {
	conformance(t, testenv.ClusterURL(testenv.StartRedisCluster(t)))
}

// And on a primary found through Sentinel.
func TestConformanceSentinel(t *testing.T) {
	conformance(t, testenv.StartRedisSentinel(t).URL())
}

// The documented key layout is what the store writes.
func TestKeyLayout(t *testing.T) {
	for _, tc := range []struct{ name, url string }{
		{"single", testenv.StartRedis(t)},
		{"cluster", testenv.ClusterURL(testenv.StartRedisCluster(t))},
	} {
		t.Run(tc.name, func(t *testing.T) { testKeyLayout(t, tc.url) })
	}
}

func testKeyLayout(t *testing.T, url string) {
	s := openFlushed(t, url)
	defer s.Close()
	ctx := t.Context()
	in := store.Instance{Name: "vm", UUID: "u-1", Addresses: []string{"10.0.0.1", "2001:db8::1"}, Spec: []byte(`{}`)}
	if _, _, err := s.Put(ctx, in, store.Document{Tree: []byte("t")}, 0); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if err := s.PutSecret(ctx, "u-1", "disk", store.WrappedSecret{KeyID: "k"}); err != nil {
		t.Fatalf("PutSecret: %v", err)
	}
	if err := s.SetPassword(ctx, "u-1", []byte("pw")); err != nil {
		t.Fatalf("SetPassword: %v", err)
	}
	keys, err := s.scan(ctx, "*")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"vmeta:inst:{u-1}":       "hash",
		"vmeta:doc:{u-1}":        "hash",
		"vmeta:secret:{u-1}":     "hash",
		"vmeta:name:vm":          "string",
		"vmeta:addr:10.0.0.1":    "string",
		"vmeta:addr:2001:db8::1": "string",
	}
	if len(keys) != len(want) {
		t.Errorf("keys = %v, want %d keys", keys, len(want))
	}
	for key, typ := range want {
		if got := s.rdb.Type(ctx, key).Val(); got != typ {
			t.Errorf("TYPE %s = %q, want %q", key, got, typ)
		}
	}
	rec := s.rdb.HGetAll(ctx, "vmeta:inst:{u-1}").Val()
	for _, f := range []string{"name", "rev", "addrs", "json", "password"} {
		if _, ok := rec[f]; !ok {
			t.Errorf("record hash lacks field %s: %v", f, rec)
		}
	}
	if len(rec) != 5 {
		t.Errorf("record hash = %v, want 5 fields", rec)
	}
	// Claims name the owner and the token of the write that made them
	// (here all the same one).
	var claims []string
	for _, k := range []string{"vmeta:name:vm", "vmeta:addr:10.0.0.1", "vmeta:addr:2001:db8::1"} {
		claims = append(claims, s.rdb.Get(ctx, k).Val())
	}
	if !strings.HasPrefix(claims[0], "u-1 ") || len(claims[0]) != len("u-1 ")+24 || claims[1] != claims[0] || claims[2] != claims[0] {
		t.Errorf("claims = %q, want \"u-1 <token>\" each, one token", claims)
	}
	// The keys of one instance share a Cluster hash slot.
	slot := s.rdb.ClusterKeySlot(ctx, "vmeta:inst:{u-1}").Val()
	for _, key := range []string{"vmeta:doc:{u-1}", "vmeta:secret:{u-1}", lockKey("u-1")} {
		if got := s.rdb.ClusterKeySlot(ctx, key).Val(); got != slot {
			t.Errorf("slot of %s = %d, want %d", key, got, slot)
		}
	}
	if err := s.Delete(ctx, "vm"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if keys, _ := s.scan(ctx, "*"); len(keys) != 0 {
		t.Errorf("keys after Delete = %v, want none", keys)
	}
}

func TestOpenErrors(t *testing.T) {
	const password = "s3cr3t-Pa55"
	unreachable := testenv.ClosedAddr(t)
	for _, tc := range []struct {
		name, url string
		want      []string // substrings of the error
	}{
		{"unreachable", "redis://" + unreachable + "/0", []string{unreachable}},
		{"unreachable with password", "redis://vmeta:" + password + "@" + unreachable + "/0", []string{unreachable}},
		{"bad scheme", "http://" + unreachable, []string{"scheme"}},
		{"bad scheme with password", "http://u:" + password + "@" + unreachable, []string{"scheme", "xxxxx"}},
		{"no scheme", unreachable, []string{"scheme"}},
		{"bad port with password", "redis://u:" + password + "@localhost:notaport/0", []string{"port"}},
		{"bad escape in password", "redis://u:" + password + "%zz@localhost/0", []string{"user or password"}},
		{"bad db with password", "redis://u:" + password + "@localhost/zero", []string{"database"}},
		{"unreachable cluster with password", "redis+cluster://u:" + password + "@" + unreachable, []string{unreachable}},
		{"unreachable sentinel with password", "redis+sentinel://u:" + password + "@m@" + unreachable + "/0", []string{unreachable, "m@"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
			defer cancel()
			s, err := Open(ctx, tc.url)
			storetest.OpenRefused(t, s, err, redactURL(tc.url), password, tc.want)
		})
	}
}

// A server that rejects the credentials: the error names the server, not
// the password.
func TestOpenWrongPassword(t *testing.T) {
	const password = "s3cr3t-Pa55"
	srv := testenv.StartRedisServer(t, "--requirepass", "the-real-one")
	for _, url := range []string{
		"redis://" + srv.Addr() + "/0",
		"redis://:" + password + "@" + srv.Addr() + "/0",
		"redis://default:" + password + "@" + srv.Addr() + "/0",
		"redis://nobody:" + password + "@" + srv.Addr() + "/0",
	} {
		s, err := Open(t.Context(), url)
		if err == nil {
			s.Close()
			t.Fatalf("Open with a password the server does not know succeeded")
		}
		t.Logf("error: %v", err)
		if msg := err.Error(); strings.Contains(msg, password) || !strings.Contains(msg, srv.Addr()) {
			t.Fatalf("error %q: want the address and not the password", msg)
		}
	}
	s, err := Open(t.Context(), "redis://:the-real-one@"+srv.Addr()+"/0")
	if err != nil {
		t.Fatalf("Open with the right password: %v", err)
	}
	s.Close()
}

// After the server goes away calls fail (they do not hang); once it is back
// the same Store works again.
func TestServerRestart(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	s := openFlushed(t, srv.URL())
	defer s.Close()
	in := store.Instance{Name: "vm", UUID: "u-1", Spec: []byte(`{}`)}
	if _, _, err := s.Put(t.Context(), in, store.Document{}, 0); err != nil {
		t.Fatalf("Put: %v", err)
	}
	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := s.Instance(ctx, "vm"); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Instance with the server down: %v, want a connection error", err)
	}
	srv.Start()
	// Nothing was persisted: the restarted server is empty.
	if _, err := s.Instance(t.Context(), "vm"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Instance after restart: %v, want not found", err)
	}
	if _, _, err := s.Put(t.Context(), in, store.Document{}, 0); err != nil {
		t.Fatalf("Put after restart: %v", err)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://localhost:6379/0":                          "redis://localhost:6379/0",
		"redis://u:p@localhost:6379/0":                      "redis://xxxxx@localhost:6379/0",
		"rediss://:p@ss@host/1?dial_timeout=3s":             "rediss://xxxxx@host/1?dial_timeout=3s",
		"redis://host/0?x=a@b":                              "redis://host/0?x=a@b",
		"no-scheme":                                         "no-scheme",
		"redis+sentinel://mymaster@h1,h2/0":                 "redis+sentinel://mymaster@h1,h2/0",
		"redis+sentinel://u:p@ss@mymaster@h1/0":             "redis+sentinel://xxxxx@mymaster@h1/0",
		"redis+cluster://u:p@h1,h2?dial_timeout=1s":         "redis+cluster://xxxxx@h1,h2?dial_timeout=1s",
		"redis+sentinel://m@h1/0?sentinel_password=x&a=b#f": "redis+sentinel://m@h1/0?sentinel_password=xxxxx&a=b#f",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func BenchmarkPut(b *testing.B) {
	s := openFlushed(b, testenv.StartRedis(b))
	defer s.Close()
	storetest.BenchmarkPut(b, s)
}

func BenchmarkDocument(b *testing.B) {
	s := openFlushed(b, testenv.StartRedis(b))
	defer s.Close()
	storetest.BenchmarkDocument(b, s)
}

func BenchmarkLookupAddress(b *testing.B) {
	s := openFlushed(b, testenv.StartRedis(b))
	defer s.Close()
	storetest.BenchmarkLookupAddress(b, s)
}

func TestParseURL(t *testing.T) {
	opts, err := parseURL("rediss://vmeta:pw@redis.example:6380/2?dial_timeout=3s")
	if err != nil {
		t.Fatalf("parseURL: %v", err)
	}
	if opts.Addr != "redis.example:6380" || opts.DB != 2 || opts.Username != "vmeta" || opts.Password != "pw" ||
		opts.TLSConfig == nil || opts.DialTimeout != 3*time.Second {
		t.Fatalf("parseURL(rediss://...) = %+v", opts)
	}
	opts, err = parseURL("redis://[::1]/5")
	if err != nil || opts.Addr != "[::1]:6379" || opts.DB != 5 || opts.TLSConfig != nil {
		t.Fatalf("parseURL(redis://[::1]/5) = %+v, %v", opts, err)
	}
	// go-redis rejects unknown options; the error names the option only.
	_, err = parseURL("redis://u:pw-in-url@host/0?pw-in-query=1")
	if err == nil || strings.Contains(err.Error(), "pw-in-url") {
		t.Fatalf("unknown option: %v", err)
	}
}
