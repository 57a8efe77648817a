package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/client"
)

// The request paths the benchmark loads.
const (
	pathHostname = "/2009-04-04/meta-data/hostname"
	pathMetaData = "/openstack/latest/meta_data.json"
)

// replicaPkg is the Redis replica's command, relative to the module root.
const replicaPkg = "server/cmd/vmeta-metadata"

// A target is one server under load.
type target struct {
	key     string // a, b, c, d
	name    string
	base    string   // http://host:port
	paths   []string // the request paths it is loaded with
	proc    *proc
	skipped string // why it was not run, when it was not

	// expect holds the body each path must answer with (exact), or check
	// the test a body must pass when it cannot be exact.
	expect map[string][]byte
	check  map[string]func([]byte) error
}

func (t *target) label() string { return "(" + t.key + ") " + t.name }

// binaries are the programs built for one run.
type binaries struct {
	hostctl, bare, replica string // replica is "" when its package does not exist yet
}

// build builds hostctl, the bare server and (when its package exists) the
// Redis replica into dir, in one go build.
func build(ctx context.Context, root, dir string) (binaries, error) {
	pkgs := []string{"./hostctl/cmd/hostctl", "./test/bench/metadata/bare"}
	b := binaries{hostctl: filepath.Join(dir, "hostctl"), bare: filepath.Join(dir, "bare")}
	if m, _ := filepath.Glob(filepath.Join(root, replicaPkg, "*.go")); len(m) > 0 {
		pkgs = append(pkgs, "./"+replicaPkg)
		b.replica = filepath.Join(dir, filepath.Base(replicaPkg))
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return b, fmt.Errorf("go build %s: %w\n%s", strings.Join(pkgs, " "), err, out)
	}
	return b, nil
}

// env is what starting targets needs.
type env struct {
	tmp   string
	bins  binaries
	procs *procs
	// hostctlFlags and replicaFlags are appended to the servers' command
	// lines (see serverFlags).
	hostctlFlags, replicaFlags []string
}

// serverFlags are the metadata service settings of both our servers
// under load, with prefix "metadata-" for `hostctl serve` and "" for the
// replica: no access log (Hegel's cannot be turned off, so this favours
// ours; the issue asks for logs that can be turned off), and the
// per-instance rate limit and per-address connection limit kept in the
// request path but out of reach: all of wrk's load comes from one
// instance at one address, which the defaults (50 requests/s, 64
// connections) would refuse. Room for twice the connections, so that a
// run's connections may open before the server has seen the previous
// run's close. extra (-hostctl-flag, -replica-flag) comes last and wins.
func serverFlags(prefix string, connections int, extra []string) []string {
	return append([]string{
		"--" + prefix + "access-log=false",
		"--" + prefix + "rate-limit=1e9",
		"--" + prefix + "rate-burst=1000000000",
		"--" + prefix + "max-conns-per-address=" + strconv.Itoa(2*connections),
	}, extra...)
}

// host is a running hostctl daemon.
type host struct {
	proc *proc
	base string // its metadata service
	api  *client.Client
}

// startHostctl starts `hostctl serve` on a fresh data directory; store is
// "" for the embedded store or a redis:// URL.
func (e *env) startHostctl(ctx context.Context, name, store string) (*host, error) {
	dir := filepath.Join(e.tmp, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "s.sock")
	metricsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"serve", "--data-dir", dir, "--socket", sock, "--metadata-listen", addr, "--log-level", "warn", "--virt", "none",
		"--metadata-metrics-listen", metricsAddr}
	if store != "" {
		args = append(args, "--store", store)
	}
	p, err := e.procs.start(spawn{name: "hostctl " + name, log: filepath.Join(e.tmp, name+".log"),
		bin: e.bins.hostctl, args: append(args, e.hostctlFlags...)})
	if err != nil {
		return nil, err
	}
	if err := p.waitDial(ctx, "unix", sock); err != nil {
		return nil, err
	}
	if err := p.waitDial(ctx, "tcp", addr); err != nil {
		return nil, err
	}
	p.metrics = "http://" + metricsAddr + "/metrics"
	return &host{proc: p, base: "http://" + addr, api: client.NewUnix(sock)}, nil
}

// startEmbedded starts target (b): hostctl on its embedded store with the
// benchmark's instance applied.
func (e *env) startEmbedded(ctx context.Context) (*target, error) {
	h, err := e.startHostctl(ctx, "embedded", "")
	if err != nil {
		return nil, err
	}
	if _, err := h.api.Apply(ctx, benchSpec()); err != nil {
		return nil, h.proc.failed(fmt.Errorf("apply the benchmark instance: %w", err))
	}
	return &target{key: "b", name: "vmeta, embedded store", base: h.base, proc: h.proc,
		paths: []string{pathHostname, pathMetaData}}, nil
}

// startRedis starts a private redis-server without persistence and returns
// its URL (database 0).
func (e *env) startRedis(ctx context.Context) (string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("%w (apt-get install -y --no-install-recommends redis-server)", err)
	}
	addr, err := freeAddr()
	if err != nil {
		return "", err
	}
	_, port, _ := strings.Cut(addr, ":")
	dir := filepath.Join(e.tmp, "redis")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("redis: %w", err)
	}
	p, err := e.procs.start(spawn{name: "redis-server", log: filepath.Join(e.tmp, "redis.log"), bin: bin,
		args: []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--daemonize", "no", "--logfile", "", "--loglevel", "warning"}})
	if err != nil {
		return "", err
	}
	if err := p.waitDial(ctx, "tcp", addr); err != nil {
		return "", err
	}
	return "redis://" + addr, nil
}

// startReplica starts the Redis replica (server/cmd/vmeta-metadata) on
// storeURL.
func (e *env) startReplica(ctx context.Context, name, storeURL string) (*proc, string, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	metrics, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	args := []string{"--store", storeURL, "--listen", addr, "--metrics-listen", metrics, "--access-log=false"}
	p, err := e.procs.start(spawn{name: name, log: filepath.Join(e.tmp, name+".log"),
		bin: e.bins.replica, args: append(args, e.replicaFlags...)})
	if err != nil {
		return nil, "", err
	}
	if err := p.waitDial(ctx, "tcp", addr); err != nil {
		return nil, "", err
	}
	return p, "http://" + addr, nil
}

// startReplicaTarget starts target (c): redis-server, a hostctl daemon on
// it that publishes the benchmark's instance, and the replica that serves
// it. It returns a skipped target when the replica is not built yet.
func (e *env) startReplicaTarget(ctx context.Context, redisURL string) (*target, error) {
	t := &target{key: "c", name: "vmeta replica, Redis", paths: []string{pathHostname, pathMetaData}}
	if e.bins.replica == "" {
		t.skipped = replicaPkg + " not built yet"
		return t, nil
	}
	h, err := e.startHostctl(ctx, "publisher", redisURL+"/0")
	if err != nil {
		return nil, err
	}
	if _, err := h.api.Apply(ctx, benchSpec()); err != nil {
		return nil, h.proc.failed(fmt.Errorf("apply the benchmark instance: %w", err))
	}
	p, base, err := e.startReplica(ctx, "replica", redisURL+"/0")
	if err != nil {
		return nil, err
	}
	t.proc, t.base = p, base
	return t, nil
}

// route is one constant answer of the bare server (see bare/main.go).
type route struct {
	Path        string `json:"path"`
	ContentType string `json:"content_type"`
	Body        string `json:"body"`
}

// startBare starts target (a), answering each path with the given
// response (ours, captured from target (b), so that the bodies and
// content types are the same).
func (e *env) startBare(ctx context.Context, routes []route) (*target, error) {
	cfg, err := json.Marshal(routes)
	if err != nil {
		return nil, fmt.Errorf("bare routes: %w", err)
	}
	file := filepath.Join(e.tmp, "bare-routes.json")
	if err := os.WriteFile(file, cfg, 0o600); err != nil {
		return nil, fmt.Errorf("bare routes: %w", err)
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	statsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p, err := e.procs.start(spawn{name: "bare", log: filepath.Join(e.tmp, "bare.log"),
		bin: e.bins.bare, args: []string{"-listen", addr, "-config", file, "-metrics-listen", statsAddr}})
	if err != nil {
		return nil, err
	}
	p.metrics = "http://" + statsAddr + "/metrics"
	if err := p.waitDial(ctx, "tcp", addr); err != nil {
		return nil, err
	}
	t := &target{key: "a", name: "bare net/http", base: "http://" + addr, proc: p, expect: map[string][]byte{}}
	for _, r := range routes {
		t.paths = append(t.paths, r.Path)
		t.expect[r.Path] = []byte(r.Body)
	}
	return t, nil
}

// newClient returns a client that opens a fresh connection per request.
func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
}

// fetch GETs base+path on a fresh connection and returns the body and
// content type; any status but 200 is an error.
func fetch(ctx context.Context, client *http.Client, base, path string) ([]byte, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return nil, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, "", fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return body, "", fmt.Errorf("GET %s: %s: %q", path, resp.Status, truncate(body, 200))
	}
	return body, resp.Header.Get("Content-Type"), nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return append(b[:n:n], "…"...)
	}
	return b
}

// verify checks that every path of t answers 200 with the expected body.
func verify(ctx context.Context, t *target) error {
	client := newClient()
	for _, p := range t.paths {
		body, _, err := fetch(ctx, client, t.base, p)
		if err == nil {
			if want, ok := t.expect[p]; ok && !bytes.Equal(body, want) {
				err = fmt.Errorf("GET %s: body %q, want %q", p, truncate(body, 200), truncate(want, 200))
			} else if check, ok := t.check[p]; ok {
				if cerr := check(body); cerr != nil {
					err = fmt.Errorf("GET %s: %w", p, cerr)
				}
			}
		}
		if err != nil {
			if t.proc != nil {
				return t.proc.failed(fmt.Errorf("%s: %w", t.label(), err))
			}
			return fmt.Errorf("%s: %w", t.label(), err)
		}
	}
	return nil
}

// checkMetaData accepts a meta_data.json of the instance uuid with
// hostname (any hostname when ""); its random_seed differs from one
// publish to the next, so the body cannot be compared as a whole.
func checkMetaData(uuid, hostname string) func([]byte) error {
	return func(b []byte) error {
		var md struct {
			UUID     string `json:"uuid"`
			Hostname string `json:"hostname"`
		}
		if err := json.Unmarshal(b, &md); err != nil {
			return fmt.Errorf("meta_data.json: %w", err)
		}
		if md.UUID != uuid || (hostname != "" && md.Hostname != hostname) {
			return fmt.Errorf("meta_data.json of %s (%s), want %s (%s)", md.UUID, md.Hostname, uuid, hostname)
		}
		return nil
	}
}
