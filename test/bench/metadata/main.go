// Command metadata is vmeta's whole-system speed benchmark (`make bench`):
// in one run on this machine, with the same load generator (wrk, 2
// threads, 64 connections by default) and one target after the other, it
// loads
//
//	(a) a bare net/http server answering constant bodies (./bare), the
//	    ceiling on this machine; it answers the very bytes and content
//	    types that (b) does;
//	(b) `hostctl serve` on its embedded store;
//	(c) the Redis replica, server/cmd/vmeta-metadata, on a private
//	    redis-server, fed by a hostctl daemon (skipped until that command
//	    exists);
//	(d) Tinkerbell Hegel v0.14.2 with its flatfile backend, built in a
//	    throwaway module and cached under the user cache directory
//	    (vmeta-bench/); its code never enters this module;
//
// with GET /2009-04-04/meta-data/hostname (all four) and GET
// /openstack/latest/meta_data.json (a to c), all serving one realistic
// instance to 127.0.0.1, where wrk connects from. Every server runs as its
// own process on a loopback port and is checked to answer 200 with the
// expected body before it is loaded; every load is preceded by a warm-up.
// It prints requests/s, p50 and p99 per target, the server's CPU time
// per request (user + system time of the server process over the
// measured run, to the nanosecond from /proc/<pid>/task/*/schedstat
// (serverCPU; /proc/<pid>/stat's ticks without it): the figure other work on the
// machine moves least), the load average as each run starts and ends,
// the ratios to the bare handler and to Hegel, and PASS/MISS per goal of the issue (b and c at
// least 0.9 × a and 1.1 × d in requests/s, p99 at most 1.2 × a's). A run
// in which wrk saw errors (status >= 400, socket errors) is flagged.
//
// Then it measures memory: a fresh hostctl daemon (and a fresh replica)
// gets -instances instances, each with its own source address 127.1.x.y,
// published in parallel over the admin socket; each is then read once
// from its own address; the server's VmRSS is printed before publishing,
// after publishing and after reading.
//
//	go run ./test/bench/metadata [-duration 10s] [-connections 64] [-instances 10000] [-storm 1000] [-storm-only]
//
// Between the two it runs the boot storm (storm.go): a thousand guests on
// their own addresses making cloud-init's boot requests at once, against
// a fresh hostctl (cold cache) and again (warm), and against the bare
// handler, printed as ratios of server CPU time and p99.
//
// Speed is reported, not asserted: the exit status is non-zero only on
// errors (a server that does not start or answers wrongly, wrk missing).
// Everything started is stopped at the end, on errors and on SIGINT too,
// and the temporary directory is removed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// config is the command line.
type config struct {
	duration, warmup   time.Duration
	connections        int
	threads            int
	rounds             int
	instances          int
	storm, stormRounds int
	stormWarm          int
	stormOnly          bool
	stormSettle        time.Duration
	stormConns         []connMode
	stormApart         bool
	memoryTimeout      time.Duration
	wrk, hegel         string
	hostctlF, replicaF listFlag
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	var cfg config
	flag.DurationVar(&cfg.duration, "duration", 10*time.Second, "measured wrk run per target and path (whole seconds)")
	flag.DurationVar(&cfg.warmup, "warmup", 2*time.Second, "wrk warm-up before each measured run (0: none)")
	flag.IntVar(&cfg.connections, "connections", 64, "wrk connections")
	flag.IntVar(&cfg.threads, "threads", 2, "wrk threads")
	flag.IntVar(&cfg.rounds, "rounds", 1, "times to load every target, one after the other; the tables show medians")
	flag.IntVar(&cfg.instances, "instances", 10000, fmt.Sprintf("instances published for the memory measurement (0: skip it; at most %d)", maxInstances))
	flag.IntVar(&cfg.storm, "storm", 1000, fmt.Sprintf("guests of the boot storm, cold and warm against the bare handler (storm.go; 0: skip it; at most %d)", maxInstances))
	flag.IntVar(&cfg.stormRounds, "storm-rounds", 3, "boot storm rounds (fresh processes each); the goals use the median")
	flag.IntVar(&cfg.stormWarm, "storm-warm", 3, "warm storms per server and round, each back to back with the other server's")
	flag.DurationVar(&cfg.stormSettle, "storm-settle", 2*time.Second, "time a fresh server is left alone before the cold storm (its settle CPU is printed apart; 0: storm at once)")
	stormConns := flag.String("storm-conns", string(connPerRequest)+","+string(connKeepAlive), fmt.Sprintf("how the storm's guests connect, comma-separated: %q (a new connection per request, as cloud-init) and/or %q (one connection per guest)", connPerRequest, connKeepAlive))
	flag.BoolVar(&cfg.stormApart, "storm-apart", false, "storm one server after the other (alternating) instead of both in each storm")
	flag.BoolVar(&cfg.stormOnly, "storm-only", false, "run only the boot storm (no wrk, Hegel or memory phase)")
	flag.DurationVar(&cfg.memoryTimeout, "memory-timeout", 10*time.Minute, "time limit for publishing, and again for reading, per store in the memory phase")
	flag.StringVar(&cfg.wrk, "wrk", "wrk", "wrk binary")
	flag.StringVar(&cfg.hegel, "hegel", "", "Hegel binary to use instead of the cached build of "+hegelVersion+` ("none": no Hegel target)`)
	flag.Var(&cfg.hostctlF, "hostctl-flag", "extra flag for 'hostctl serve' (repeatable; overrides the benchmark's settings)")
	flag.Var(&cfg.replicaF, "replica-flag", "extra flag for vmeta-metadata (repeatable; overrides the benchmark's settings)")
	flag.Parse()
	modes, err := parseConnModes(*stormConns)
	if err != nil {
		fmt.Fprintln(os.Stderr, "metadata bench:", err)
		os.Exit(2)
	}
	cfg.stormConns = modes

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg)
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("interrupted: %w", err)
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/metadata:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	if flag.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if cfg.connections < cfg.threads || cfg.threads < 1 || cfg.duration < time.Second || cfg.rounds < 1 {
		return errors.New("need -threads >= 1, -connections >= -threads, -duration >= 1s and -rounds >= 1")
	}
	if cfg.instances < 0 || cfg.instances > maxInstances {
		return fmt.Errorf("-instances must be between 0 and %d", maxInstances)
	}
	if cfg.storm < 0 || cfg.storm > maxInstances || cfg.stormRounds < 1 || cfg.stormWarm < 1 {
		return fmt.Errorf("-storm must be between 0 and %d, -storm-rounds and -storm-warm at least 1", maxInstances)
	}
	if cfg.stormOnly {
		return runStorm(ctx, cfg)
	}
	wrkBin, err := exec.LookPath(cfg.wrk)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/metadata: wrk not found; install it with:\n  apt-get install -y --no-install-recommends wrk")
		return fmt.Errorf("load generator: %w", err)
	}
	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "vmeta-bench-")
	if err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	ps := &procs{}
	defer ps.stopAll() // before the directory goes (deferred later, runs first)

	fmt.Printf("machine: %d CPUs, %s/%s, %s, load average %s; load: %s, %d threads, %d connections, %s per run after a %s warm-up\n",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), loadAverage(), wrkBin, cfg.threads, cfg.connections,
		wrkSeconds(cfg.duration), wrkSeconds(cfg.warmup))
	bins, err := build(ctx, root, filepath.Join(tmp, "bin"))
	if err != nil {
		return err
	}
	hegelBin, err := hegelBinary(ctx, cfg.hegel, tmp)
	if err != nil {
		return err
	}
	e := &env{tmp: tmp, bins: bins, procs: ps,
		hostctlFlags: serverFlags("metadata-", cfg.connections, cfg.hostctlF),
		replicaFlags: serverFlags("", cfg.connections, cfg.replicaF)}
	fmt.Printf("hostctl serve %s\nvmeta-metadata %s\n", strings.Join(e.hostctlFlags, " "), strings.Join(e.replicaFlags, " "))

	ts, redisURL, err := e.startTargets(ctx, hegelBin)
	if err != nil {
		return err
	}
	wc := wrkConfig{bin: wrkBin, threads: cfg.threads, connections: cfg.connections, duration: cfg.duration, warmup: cfg.warmup}
	b := &board{targets: ts, rounds: cfg.rounds}
	for round := 1; round <= cfg.rounds; round++ {
		for _, path := range []string{pathHostname, pathMetaData} {
			for _, t := range ts {
				if !serves(t, path) || t.skipped != "" {
					continue
				}
				if err := load(ctx, wc, b, t, path, round); err != nil {
					return err
				}
			}
		}
	}
	for _, t := range ts {
		ps.stopSome(t.proc)
	}
	fmt.Printf("load average after the runs: %s (other work on this machine makes the figures noisy; see -rounds)\n", loadAverage())
	for _, path := range []string{pathHostname, pathMetaData} {
		b.table(os.Stdout, path, wc)
	}
	fmt.Println()
	for _, path := range []string{pathHostname, pathMetaData} {
		b.goals(os.Stdout, path)
	}

	if cfg.storm > 0 {
		if err := e.stormPhases(ctx, cfg); err != nil {
			return err
		}
	}
	if cfg.instances > 0 {
		mem, err := e.memoryPhase(ctx, cfg.instances, cfg.memoryTimeout, redisURL)
		memoryTable(os.Stdout, mem)
		if err != nil {
			return fmt.Errorf("memory: %w", err)
		}
	}
	return nil
}

// runStorm runs the boot storm alone (-storm-only).
func runStorm(ctx context.Context, cfg config) error {
	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "vmeta-bench-")
	if err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	ps := &procs{}
	defer ps.stopAll()
	fmt.Printf("machine: %d CPUs, %s/%s, %s, load average %s\n", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), loadAverage())
	bins, err := build(ctx, root, filepath.Join(tmp, "bin"))
	if err != nil {
		return err
	}
	e := &env{tmp: tmp, bins: bins, procs: ps, hostctlFlags: serverFlags("metadata-", cfg.connections, cfg.hostctlF)}
	fmt.Printf("hostctl serve %s\n", strings.Join(e.hostctlFlags, " "))
	if cfg.storm == 0 {
		return nil
	}
	return e.stormPhases(ctx, cfg)
}

// stormPhases runs the boot storm once per -storm-conns mode.
func (e *env) stormPhases(ctx context.Context, cfg config) error {
	for _, mode := range cfg.stormConns {
		if err := e.stormPhase(ctx, mode, !cfg.stormApart, cfg.storm, cfg.stormRounds, cfg.stormWarm, cfg.stormSettle); err != nil {
			return fmt.Errorf("boot storm (%s connections): %w", mode, err)
		}
	}
	return nil
}

// load runs wrk against one target and path and adds the result to b.
func load(ctx context.Context, wc wrkConfig, b *board, t *target, path string, round int) error {
	label := ""
	if b.rounds > 1 {
		label = fmt.Sprintf(" (round %d/%d)", round, b.rounds)
	}
	fmt.Printf("loading %s with GET %s%s …\n", t.label(), path, label)
	stopPerf := startPerf(ctx, t.proc.pid()) // VMETA_BENCH_PERF (storm.go)
	r, err := wc.run(ctx, t.base+path, t.proc.pid())
	stopPerf()
	if err != nil {
		return fmt.Errorf("%s: %w", t.label(), err)
	}
	if t.proc.exited() {
		return t.proc.failed(errors.New("exited under load"))
	}
	r.target, r.path = t.key, path
	b.add(path, r)
	fmt.Printf("  %s req/s, p50 %s, p99 %s, %d errors; server CPU %s/request (%s over %d requests); load average %s at the start, %s at the end\n",
		thousands(r.rps), dur(r.p50), dur(r.p99), r.errors(), cpuDur(r.cpuPerReq), r.cpu.Round(10*time.Millisecond), r.requests, r.loadStart, r.loadEnd)
	return nil
}

// startTargets starts and checks the four targets, in the order they are
// loaded. redisURL is the private redis-server's, "" when (c) is skipped.
func (e *env) startTargets(ctx context.Context, hegelBin string) (ts []*target, redisURL string, err error) {
	b, err := e.startEmbedded(ctx)
	if err != nil {
		return nil, "", err
	}
	// The bare server answers what ours answers: same bytes, same
	// content types.
	client := newClient()
	var routes []route
	for _, p := range b.paths {
		body, ctype, err := fetch(ctx, client, b.base, p)
		if err != nil {
			return nil, "", b.proc.failed(fmt.Errorf("%s: %w", b.label(), err))
		}
		routes = append(routes, route{Path: p, ContentType: ctype, Body: string(body)})
	}
	hostname := routes[0].Body
	if !strings.HasPrefix(hostname, benchHostname) {
		return nil, "", fmt.Errorf("%s: hostname %q, want %s or %s.<domain>", b.label(), hostname, benchHostname, benchHostname)
	}
	b.check = map[string]func([]byte) error{pathMetaData: checkMetaData(benchUUID, hostname)}
	b.expect = map[string][]byte{pathHostname: []byte(hostname)}

	a, err := e.startBare(ctx, routes)
	if err != nil {
		return nil, "", err
	}
	if e.bins.replica != "" {
		if redisURL, err = e.startRedis(ctx); err != nil {
			return nil, "", err
		}
	}
	c, err := e.startReplicaTarget(ctx, redisURL)
	if err != nil {
		return nil, "", err
	}
	if c.skipped == "" {
		c.expect = b.expect
		c.check = b.check
	} else {
		fmt.Printf("(c) skipped: %s\n", c.skipped)
	}
	d, err := e.startHegel(ctx, hegelBin, hostname)
	if err != nil {
		return nil, "", err
	}
	ts = []*target{a, b, c, d}
	for _, t := range ts {
		if t.skipped != "" {
			continue
		}
		if err := verify(ctx, t); err != nil {
			return nil, "", err
		}
		fmt.Printf("%s at %s (pid %d) answers %s\n", t.label(), t.base, t.proc.pid(), strings.Join(t.paths, " and "))
	}
	return ts, redisURL, nil
}

// moduleRoot is the directory of the main module's go.mod (the benchmark
// builds the servers from there).
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run this from inside the vmeta module (go run ./test/bench/metadata)")
	}
	return filepath.Dir(mod), nil
}

// loadAverage is the 1, 5 and 15 minute load average, "?" when unknown.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

func writeJSON(file string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(b, '\n'), 0o600)
}
