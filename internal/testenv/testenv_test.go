package testenv

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB whose Skipf and Fatalf record instead of
// stopping the test.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
}

func TestRequire(t *testing.T) {
	for _, tc := range []struct {
		env                string
		wantSkip, wantFail bool
	}{
		{"", true, false},
		{"0", true, false},
		{"1", false, true},
	} {
		t.Setenv(RequireEnv, tc.env)
		r := &recorder{TB: t}
		Require(r, "frobnicator", "not installed")
		if r.skipped != tc.wantSkip || r.failed != tc.wantFail {
			t.Errorf("%s=%q: skipped %t, failed %t; want %t, %t", RequireEnv, tc.env, r.skipped, r.failed, tc.wantSkip, tc.wantFail)
		}
		if !strings.Contains(r.msg, "frobnicator") || !strings.Contains(r.msg, "not installed") {
			t.Errorf("message %q should name what is missing and why", r.msg)
		}
	}
}

func TestLookPath(t *testing.T) {
	t.Setenv(RequireEnv, "")
	if p := LookPath(t, "sh"); !strings.HasSuffix(p, "/sh") {
		t.Errorf("LookPath(sh) = %q", p)
	}
	r := &recorder{TB: t}
	if p := LookPath(r, "vmeta-no-such-binary"); p != "" || !r.skipped {
		t.Errorf("LookPath of a missing binary = %q, skipped %t; want a skip", p, r.skipped)
	}
	t.Setenv(RequireEnv, "1")
	r = &recorder{TB: t}
	if LookPath(r, "vmeta-no-such-binary"); !r.failed {
		t.Errorf("LookPath of a missing binary with %s=1 did not fail", RequireEnv)
	}
}

func TestRedisServerStopStart(t *testing.T) {
	srv := StartRedisServer(t)
	if !strings.HasPrefix(srv.URL(), "redis://127.0.0.1:") || !strings.HasSuffix(srv.URL(), "/0") {
		t.Fatalf("URL() = %q", srv.URL())
	}
	if err := ping(srv.Addr()); err != nil {
		t.Fatalf("PING a started server: %v", err)
	}
	addr := srv.Addr()
	srv.Stop()
	srv.Stop() // idempotent
	if err := ping(addr); err == nil {
		t.Fatal("PING answered after Stop")
	}
	srv.Start()
	srv.Start() // no-op while running
	if srv.Addr() != addr {
		t.Fatalf("restarted on %s, want %s", srv.Addr(), addr)
	}
	if err := ping(addr); err != nil {
		t.Fatalf("PING after Start: %v", err)
	}
}

func TestStartRedisTwice(t *testing.T) {
	a, b := StartRedis(t), StartRedis(t)
	if a == b {
		t.Fatalf("two servers share %s", a)
	}
}

func TestStartRedisCluster(t *testing.T) {
	nodes := StartRedisClusterServers(t)
	if len(nodes) != 3 {
		t.Fatalf("%d nodes, want 3", len(nodes))
	}
	for _, n := range nodes {
		info, err := redisCommand(n.Addr(), "CLUSTER", "INFO")
		if err != nil {
			t.Fatalf("CLUSTER INFO on %s: %v", n.Addr(), err)
		}
		for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:3", "cluster_size:3"} {
			if !strings.Contains(info, want) {
				t.Errorf("%s: CLUSTER INFO lacks %q:\n%s", n.Addr(), want, info)
			}
		}
	}
	// A key is answered by its slot's owner and redirected by the others.
	moved := 0
	for _, n := range nodes {
		if _, err := redisCommand(n.Addr(), "SET", "k", "v"); err != nil {
			if !strings.HasPrefix(err.Error(), "MOVED ") {
				t.Fatalf("SET on %s: %v", n.Addr(), err)
			}
			moved++
		}
	}
	if moved != 2 {
		t.Errorf("%d of 3 nodes redirected SET, want 2", moved)
	}
	if url := ClusterURL(StartRedisCluster(t)); !strings.HasPrefix(url, "redis+cluster://127.0.0.1:") || strings.Count(url, ",") != 2 {
		t.Errorf("ClusterURL = %q", url)
	}
}

func TestStartRedisSentinel(t *testing.T) {
	s := StartRedisSentinel(t)
	got, err := redisCommand(s.Sentinel.Addr(), "SENTINEL", "get-master-addr-by-name", SentinelMaster)
	if err != nil || strings.ReplaceAll(got, "\n", ":") != s.Master.Addr() {
		t.Fatalf("sentinel names %q, %v; want %s", got, err, s.Master.Addr())
	}
	if want := "redis+sentinel://" + SentinelMaster + "@" + s.Sentinel.Addr() + "/0"; s.URL() != want {
		t.Errorf("URL() = %q, want %q", s.URL(), want)
	}
	if role, err := redisCommand(s.Master.Addr(), "ROLE"); err != nil || !strings.HasPrefix(role, "master") {
		t.Errorf("ROLE of the primary = %q, %v", role, err)
	}
}

func TestStartRedisSentinels(t *testing.T) {
	s := StartRedisSentinels(t)
	if len(s.Sentinels) != 3 || s.Sentinel != s.Sentinels[0] {
		t.Fatalf("%d sentinels, want 3 with Sentinel first", len(s.Sentinels))
	}
	for _, sen := range s.Sentinels {
		fields, err := sentinelMasterInfo(sen.Addr())
		if err != nil || fields["quorum"] != "2" || fields["num-slaves"] != "1" || fields["num-other-sentinels"] != "2" {
			t.Errorf("SENTINEL MASTER on %s = %v, %v; want quorum 2, 1 replica, 2 other sentinels", sen.Addr(), fields, err)
		}
	}
	if role, err := redisCommand(s.Replica.Addr(), "ROLE"); err != nil || !strings.HasPrefix(role, "slave") {
		t.Errorf("ROLE of the replica = %q, %v", role, err)
	}
	if n := strings.Count(s.URL(), ","); n != 2 {
		t.Errorf("URL() = %q, want three sentinels", s.URL())
	}
}

func TestRedisServerPauseResume(t *testing.T) {
	srv := StartRedisServer(t)
	srv.Pause()
	if err := ping(srv.Addr()); err == nil {
		t.Fatal("PING answered while paused")
	}
	srv.Resume()
	if err := ping(srv.Addr()); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
	srv.Pause()
	srv.Stop() // a paused server can be stopped
}
