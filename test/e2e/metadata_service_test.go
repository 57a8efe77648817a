package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/testenv"
)

// replicaProc is a running vmeta-metadata: a metadata service replica of
// its own, with no hostctl in its process, serving what the store holds.
type replicaProc struct {
	t testing.TB
	// Addr is the guest-facing listener, MetricsAddr the operator
	// listener (/metrics, /healthz); both on 127.0.0.1.
	Addr, MetricsAddr string

	store string
	args  []string

	proc *testenv.Process
}

// startReplica starts `vmeta-metadata --store storeURL` on free loopback
// ports (guest listener and metrics listener) with the extra flags args,
// waits until it answers GET / (the EC2 version list, which needs no
// store), and stops it (SIGTERM, expecting a clean exit) when the test
// ends; its log is printed when the test failed.
func startReplica(t testing.TB, storeURL string, args ...string) *replicaProc {
	t.Helper()
	r := &replicaProc{t: t, store: storeURL, args: args}
	t.Cleanup(func() {
		r.Stop()
		if t.Failed() {
			t.Logf("vmeta-metadata (--store %s) logged:\n%s", storeURL, r.Log())
		}
	})
	for attempt := 1; ; attempt++ {
		err := r.start()
		if err == nil {
			return r
		}
		if attempt == 5 || !strings.Contains(r.Log(), "address already in use") {
			t.Fatalf("start vmeta-metadata: %v\nits output:\n%s", err, r.Log())
		}
	}
}

func (r *replicaProc) start() error {
	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	mport, err := testenv.FreePort()
	if err != nil {
		return err
	}
	r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	r.MetricsAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(mport))
	args := append([]string{"--store", r.store, "--listen", r.Addr, "--metrics-listen", r.MetricsAddr}, r.args...)
	cmd := exec.Command(replicaBin, args...)
	cmd.Env = testenv.ChildEnv(nil)
	r.proc, err = testenv.StartProcess(r.t, "vmeta-metadata", cmd)
	if err != nil {
		return err
	}
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	return r.proc.WaitReady(20*time.Second, 20*time.Millisecond, func() error {
		resp, err := c.Get(r.URL() + "/")
		if err != nil {
			return fmt.Errorf("on %s: %w", r.Addr, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("on %s: GET /: status %d", r.Addr, resp.StatusCode)
		}
		return nil
	})
}

// Stop sends SIGTERM and waits for a clean exit; stopping a stopped
// replica does nothing.
func (r *replicaProc) Stop() {
	r.t.Helper()
	r.proc.Stop()
}

// URL is the replica's guest-facing base URL.
func (r *replicaProc) URL() string { return "http://" + r.Addr }

// Log is what the replica has written so far.
func (r *replicaProc) Log() string { return r.proc.Output() }

// health GETs /healthz on the replica's metrics listener.
func (r *replicaProc) health() (int, string, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := c.Get("http://" + r.MetricsAddr + "/healthz")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

// rawGet sends one HTTP/1.1 GET with the exact request target and header
// lines given (nothing normalized, duplicates kept) from the local address
// from to addr, and reads the response.
func rawGet(from, addr, target string, headers ...string) (httpResult, error) {
	return rawRequest(http.MethodGet, from, addr, target, headers...)
}

// rawRequest is rawGet with another method (and no body).
func rawRequest(method, from, addr, target string, headers ...string) (httpResult, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return httpResult{}, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", method, target)
	hasHost := false
	for _, h := range headers {
		hasHost = hasHost || strings.HasPrefix(strings.ToLower(h), "host:")
		b.WriteString(h + "\r\n")
	}
	if !hasHost {
		b.WriteString("Host: " + addr + "\r\n")
	}
	b.WriteString("Connection: close\r\n\r\n")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return httpResult{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return httpResult{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return httpResult{}, err
	}
	return httpResult{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), body: body}, nil
}

// waitFor polls cond every interval until it returns true or within
// passes; it returns how long that took, or fails the test.
func waitFor(t testing.TB, what string, within, interval time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if cond() {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(interval)
	}
}

// changedWebSpec is webSpec(uuid) published again with another hostname,
// user data, meta and an extra public key.
func changedWebSpec(uuid string) string {
	s := webSpec(uuid)
	for _, r := range [][2]string{
		{"hostname: web-1\n", "hostname: web-one\n"},
		{"echo hello from vmeta", "echo hello again from vmeta, second version"},
		{"role: webserver", "role: cache"},
		{"public_keys:\n", "public_keys:\n  - name: added\n    data: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAddedKeyAddedKeyAddedKeyAddedKeyAddedKeyAdd added@vmeta\n"},
	} {
		if !strings.Contains(s, r[0]) {
			panic("changedWebSpec: the web spec no longer contains " + strconv.Quote(r[0]))
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	return s
}

// checkReplicaServesSpec reads the replica with cloud-init's
// MetadataReader and checks everything against the spec, then checks
// openstack/latest/meta_data.json (all devices) and that the replica and
// hostctl's own metadata service serve the same bytes.
func checkReplicaServesSpec(t *testing.T, where string, rep *replicaProc, d *daemon, s testSpec) {
	t.Helper()
	ci := readWithCloudInit(t, "service", rep.URL(), s)
	checkCloudInitRead(t, where+": cloud-init MetadataReader", ci, s, false)

	latest := mustGet(t, rep.URL()+"/openstack/latest/meta_data.json")
	checkLatestMetaData(t, where+": GET /openstack/latest/meta_data.json", latest, s)
	for _, p := range []string{"/openstack/latest/meta_data.json", "/openstack/latest/network_data.json", "/openstack/latest/user_data", "/latest/meta-data/hostname"} {
		if a, b := mustGet(t, rep.URL()+p), mustGet(t, d.URL()+p); string(a) != string(b) {
			t.Errorf("%s: GET %s: the replica and hostctl serve different documents:\nreplica %s\nhostctl %s", where, p, a, b)
		}
	}
}

// TestReplicaCloudInit: hostctl publishes to Redis, a separate
// vmeta-metadata process serves it, and cloud-init reads it; a change
// published through hostctl reaches the replica through pub/sub (the
// replica's convergence sweep is off, so nothing else could bring it).
func TestReplicaCloudInit(t *testing.T) {
	t.Parallel()
	requireCloudInit(t)
	redis := testenv.StartRedisServer(t)

	const uuid = "6c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f"
	spec := webSpec(uuid)
	s := parseTestSpec(t, spec)
	d := startDaemon(t, daemonOptions{Store: redis.URL()})
	d.Apply(spec)
	rep := startReplica(t, redis.URL(), "--sweep-interval", "0")

	checkReplicaServesSpec(t, "replica on Redis", rep, d, s)

	// The replica has the instance cached now. Publish a new version.
	spec2 := changedWebSpec(uuid)
	s2 := parseTestSpec(t, spec2)
	start := time.Now()
	d.Apply(spec2)
	applied := time.Since(start)
	// Polls 40 a second stay below the per-instance rate limit (50/s),
	// so the burst is left for cloud-init's read after.
	took := waitFor(t, "replica serves the re-applied spec (pub/sub; sweep off)", 10*time.Second, 25*time.Millisecond, func() bool {
		r := getFrom(t, "127.0.0.1", rep.URL()+"/latest/meta-data/hostname")
		return r.status == http.StatusOK && string(r.body) == s2.fqdn()
	})
	t.Logf("replica: new version served %s after `hostctl instance apply` returned (apply took %s)", took.Round(time.Millisecond), applied.Round(time.Millisecond))
	checkReplicaServesSpec(t, "replica on Redis, after the change", rep, d, s2)
	if got := string(mustGet(t, rep.URL()+"/openstack/latest/user_data")); got != s2.UserData {
		t.Errorf("replica user_data after the change = %q, want %q", got, s2.UserData)
	}
}

// TestClusterReplica: the same over a three-node Redis Cluster: hostctl
// publishes through redis+cluster://, a replica on the same URL serves it
// to cloud-init, and a change reaches it through the cluster's pub/sub.
func TestClusterReplica(t *testing.T) {
	t.Parallel()
	requireCloudInit(t)
	url := testenv.ClusterURL(testenv.StartRedisCluster(t))

	const uuid = "1f2e3d4c-5b6a-4798-8a7b-6c5d4e3f2a1b"
	spec := webSpec(uuid)
	s := parseTestSpec(t, spec)
	d := startDaemon(t, daemonOptions{Store: url})
	d.Apply(spec)
	rep := startReplica(t, url, "--sweep-interval", "0")

	checkReplicaServesSpec(t, "replica on Redis Cluster", rep, d, s)

	spec2 := changedWebSpec(uuid)
	s2 := parseTestSpec(t, spec2)
	d.Apply(spec2)
	took := waitFor(t, "cluster replica serves the re-applied spec (pub/sub; sweep off)", 10*time.Second, 25*time.Millisecond, func() bool {
		r := getFrom(t, "127.0.0.1", rep.URL()+"/latest/meta-data/hostname")
		return r.status == http.StatusOK && string(r.body) == s2.fqdn()
	})
	t.Logf("cluster replica: new version served %s after the apply returned", took.Round(time.Millisecond))
	checkReplicaServesSpec(t, "replica on Redis Cluster, after the change", rep, d, s2)
}
