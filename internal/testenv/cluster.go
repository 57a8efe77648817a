package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterReadyTimeout bounds the wait for a created cluster to report
// cluster_state:ok on every node.
const clusterReadyTimeout = 30 * time.Second

// StartRedisCluster starts a three-node Redis Cluster on loopback (three
// primaries, no replicas, every slot assigned) and returns the nodes'
// host:port addresses. See StartRedisClusterServers.
func StartRedisCluster(t testing.TB) (addrs []string) {
	t.Helper()
	for _, n := range StartRedisClusterServers(t) {
		addrs = append(addrs, n.Addr())
	}
	return addrs
}

// StartRedisClusterServers starts three redis-server processes in cluster
// mode (each with its own temporary directory, port and cluster-bus port),
// joins them with `redis-cli --cluster create … --cluster-replicas 0`, and
// waits until every node reports cluster_state:ok. The servers are killed
// when the test ends; Stop and Start of one node keep its cluster
// configuration (nodes.conf in its directory) and ports, though not its
// data. Without redis-server or redis-cli the test stops through Require.
func StartRedisClusterServers(t testing.TB) []*RedisServer {
	t.Helper()
	cli := LookPath(t, "redis-cli")
	bin := LookPath(t, "redis-server")
	var nodes []*RedisServer
	for range 3 {
		nodes = append(nodes, startClusterNode(t, bin))
	}
	args := []string{"--cluster", "create"}
	for _, n := range nodes {
		args = append(args, n.Addr())
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %s: %v; its output:\n%s", strings.Join(args, " "), err, out)
	}
	if err := waitClusterOK(nodes); err != nil {
		t.Fatalf("redis cluster %v: %v", clusterAddrs(nodes), err)
	}
	return nodes
}

// ClusterURL is the store URL of a cluster with the given seed addresses:
// redis+cluster://h1:p1,h2:p2,….
func ClusterURL(addrs []string) string { return "redis+cluster://" + strings.Join(addrs, ",") }

func clusterAddrs(nodes []*RedisServer) []string {
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	return addrs
}

// startClusterNode starts one cluster-mode redis-server. Redis's default
// bus port (port+10000) may not exist or be taken, so each node gets a
// free one of its own.
func startClusterNode(t testing.TB, bin string) *RedisServer {
	t.Helper()
	r := &RedisServer{t: t, bin: bin, dir: t.TempDir()}
	t.Cleanup(r.Stop)
	var err error
	for range 5 {
		var bus int
		if r.port, err = FreePort(); err != nil {
			break
		}
		if bus, err = FreePort(); err != nil {
			break
		}
		if bus == r.port {
			continue
		}
		r.args = []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", "2000",
		}
		if err = r.start(); err == nil {
			return r
		}
		os.Remove(filepath.Join(r.dir, "nodes.conf"))
	}
	t.Fatalf("start redis-server in cluster mode: %v", err)
	return nil
}

// waitClusterOK polls CLUSTER INFO on every node until all say
// cluster_state:ok and know all three nodes.
func waitClusterOK(nodes []*RedisServer) error {
	deadline := time.Now().Add(clusterReadyTimeout)
	for {
		var last error
		for _, n := range nodes {
			info, err := redisCommand(n.Addr(), "CLUSTER", "INFO")
			if err == nil && (!strings.Contains(info, "cluster_state:ok") ||
				!strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(nodes)))) {
				err = fmt.Errorf("%s: not ready:\n%s", n.Addr(), info)
			}
			if err != nil {
				last = err
				break
			}
		}
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %w", clusterReadyTimeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// redisCommand sends one command to the server at addr and returns its
// reply: a status, integer or bulk string as text, an array as its
// elements joined by newlines, an error reply as an error.
func redisCommand(addr string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	var req strings.Builder
	fmt.Fprintf(&req, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(req.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(conn))
}

func readReply(rd *bufio.Reader) (string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err // nil bulk: "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		var parts []string
		for range n {
			p, err := readReply(rd)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}
