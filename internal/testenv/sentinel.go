package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// SentinelMaster is the name under which StartRedisSentinel's sentinel
// monitors its primary.
const SentinelMaster = "vmeta"

// RedisSentinel is a private Redis primary watched by one sentinel.
type RedisSentinel struct {
	// Master is the primary; Stop and Start take it away and bring it back
	// on the same port.
	Master *RedisServer
	// Sentinel is the sentinel (redis-server --sentinel).
	Sentinel *RedisServer
}

// URL returns the store URL of the primary through the sentinel,
// redis+sentinel://vmeta@127.0.0.1:PORT/0.
func (s *RedisSentinel) URL() string {
	return "redis+sentinel://" + SentinelMaster + "@" + s.Sentinel.Addr() + "/0"
}

// StartRedisSentinel starts a private redis-server and a sentinel
// (redis-server in --sentinel mode, which Debian's redis-server binary
// has) that monitors it as SentinelMaster with quorum 1, and waits until
// the sentinel names the primary. Both are killed when the test ends.
func StartRedisSentinel(t testing.TB) *RedisSentinel {
	t.Helper()
	master := StartRedisServer(t)
	sen := &RedisServer{t: t, bin: master.bin, dir: t.TempDir()}
	t.Cleanup(sen.Stop)
	var err error
	for range 5 {
		if sen.port, err = FreePort(); err != nil {
			break
		}
		// The sentinel rewrites its configuration file: one per attempt.
		sen.conf = filepath.Join(sen.dir, "sentinel-"+strconv.Itoa(sen.port)+".conf")
		conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\n"+
			"sentinel down-after-milliseconds %[1]s 1000\n"+
			"sentinel failover-timeout %[1]s 10000\n", SentinelMaster, master.port)
		if err = os.WriteFile(sen.conf, []byte(conf), 0o600); err != nil {
			break
		}
		sen.args = []string{"--sentinel"}
		if err = sen.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("start redis sentinel: %v", err)
	}
	deadline := time.Now().Add(redisReadyTimeout)
	want := "127.0.0.1\n" + strconv.Itoa(master.port)
	for {
		got, err := redisCommand(sen.Addr(), "SENTINEL", "get-master-addr-by-name", SentinelMaster)
		if err == nil && got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinel %s does not name the primary %s: %q, %v", sen.Addr(), master.Addr(), got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &RedisSentinel{Master: master, Sentinel: sen}
}
