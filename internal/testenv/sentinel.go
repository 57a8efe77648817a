package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SentinelMaster is the name under which the sentinels of
// StartRedisSentinel and StartRedisSentinels monitor their primary.
const SentinelMaster = "vmeta"

// sentinelReadyTimeout bounds the wait for sentinels to see the primary,
// its replica and each other (sentinels announce themselves every 2s).
const sentinelReadyTimeout = 60 * time.Second

// RedisSentinel is a private Redis primary with one replica, watched by
// one or more sentinels.
type RedisSentinel struct {
	// Master is the primary the sentinels were started with; Stop and
	// Start take it away and bring it back on the same port (empty: after
	// a failover, the sentinels then make it a replica of the new primary).
	Master *RedisServer
	// Replica replicates Master (until a failover promotes it).
	Replica *RedisServer
	// Sentinel is the first sentinel (redis-server --sentinel).
	Sentinel *RedisServer
	// Sentinels are all the sentinels, Sentinel first.
	Sentinels []*RedisServer
}

// URL returns the store URL of the primary through the sentinels,
// redis+sentinel://vmeta@127.0.0.1:PORT[,127.0.0.1:PORT…]/0.
func (s *RedisSentinel) URL() string {
	addrs := make([]string, len(s.Sentinels))
	for i, sen := range s.Sentinels {
		addrs[i] = sen.Addr()
	}
	return "redis+sentinel://" + SentinelMaster + "@" + strings.Join(addrs, ",") + "/0"
}

// StartRedisSentinel starts a private redis-server, a replica of it and a
// sentinel (redis-server in --sentinel mode, which Debian's redis-server
// binary has) that monitors it as SentinelMaster with quorum 1, and waits
// until the sentinel names the primary and sees the replica. All are
// killed when the test ends.
func StartRedisSentinel(t testing.TB) *RedisSentinel {
	t.Helper()
	return startSentinels(t, 1, 1)
}

// StartRedisSentinels starts what StartRedisSentinel starts, with three
// sentinels and quorum 2 (a failover needs two of them to agree, as in a
// production setup), and also waits until every sentinel knows the other
// two, so that killing the primary leads to a failover.
func StartRedisSentinels(t testing.TB) *RedisSentinel {
	t.Helper()
	return startSentinels(t, 3, 2)
}

func startSentinels(t testing.TB, n, quorum int) *RedisSentinel {
	t.Helper()
	// No delay before a full sync (Redis waits 5s by default, for more
	// replicas to share it), on both: after a failover the replica is the
	// primary.
	noDelay := []string{"--repl-diskless-sync-delay", "0"}
	master := StartRedisServer(t, noDelay...)
	replica := StartRedisServer(t, append(noDelay, "--replicaof", "127.0.0.1", strconv.Itoa(master.port))...)
	s := &RedisSentinel{Master: master, Replica: replica}
	for range n {
		s.Sentinels = append(s.Sentinels, startSentinel(t, master, quorum))
	}
	s.Sentinel = s.Sentinels[0]
	deadline := time.Now().Add(sentinelReadyTimeout)
	if err := WaitReplicaSynced(replica, deadline); err != nil {
		t.Fatal(err)
	}
	want := "127.0.0.1\n" + strconv.Itoa(master.port)
	for _, sen := range s.Sentinels {
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
		for {
			fields, err := sentinelMasterInfo(sen.Addr())
			if err == nil && fields["num-slaves"] == "1" && fields["num-other-sentinels"] == strconv.Itoa(n-1) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sentinel %s does not see the replica and the other sentinels within %s: %v, %v",
					sen.Addr(), sentinelReadyTimeout, fields, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return s
}

// startSentinel starts one sentinel monitoring master with the given
// quorum; it is killed when the test ends.
func startSentinel(t testing.TB, master *RedisServer, quorum int) *RedisServer {
	t.Helper()
	sen := &RedisServer{t: t, bin: master.bin, dir: t.TempDir()}
	t.Cleanup(sen.Stop)
	var err error
	for range 5 {
		if sen.port, err = FreePort(); err != nil {
			break
		}
		// The sentinel rewrites its configuration file: one per attempt.
		sen.conf = filepath.Join(sen.dir, "sentinel-"+strconv.Itoa(sen.port)+".conf")
		conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d\n"+
			"sentinel down-after-milliseconds %[1]s 1000\n"+
			"sentinel failover-timeout %[1]s 10000\n", SentinelMaster, master.port, quorum)
		if err = os.WriteFile(sen.conf, []byte(conf), 0o600); err != nil {
			break
		}
		sen.args = []string{"--sentinel"}
		if err = sen.start(); err == nil {
			return sen
		}
	}
	t.Fatalf("start redis sentinel: %v", err)
	return nil
}

// sentinelMasterInfo returns the fields of SENTINEL MASTER SentinelMaster
// as asked of the sentinel at addr.
func sentinelMasterInfo(addr string) (map[string]string, error) {
	reply, err := redisCommand(addr, "SENTINEL", "MASTER", SentinelMaster)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(reply, "\n")
	fields := make(map[string]string, len(lines)/2)
	for i := 0; i+1 < len(lines); i += 2 {
		fields[lines[i]] = lines[i+1]
	}
	return fields, nil
}

// WaitReplicaSynced waits until the replica r has finished its sync with
// its primary (INFO replication says master_link_status:up), polling until
// deadline.
func WaitReplicaSynced(r *RedisServer, deadline time.Time) error {
	for {
		info, err := redisCommand(r.Addr(), "INFO", "replication")
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("replica %s has not synced with its primary: %w", r.Addr(), err)
			}
			return fmt.Errorf("replica %s has not synced with its primary: %q", r.Addr(), info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
