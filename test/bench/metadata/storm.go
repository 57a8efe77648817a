package main

// The boot storm (issue 23 item 3): -storm guests, each on its own source
// address 127.1.x.y with its own published instance, all start at once
// and each makes cloud-init's boot requests (stormPaths: the OpenStack
// files, then the EC2 meta-data listing and its entries, one request after
// the other). How a guest connects is -storm-conns (connMode): as
// cloud-init does, a new connection per request ("cloud-init"), or one
// keep-alive connection for all its requests ("keep-alive"). Against:
//
//   - the bare net/http server (./bare), answering every path with
//     instance 0's bytes, a fresh process per round;
//   - `hostctl serve` on its embedded store, restarted on the data
//     directory the instances were published to: a fresh process whose
//     cache is empty, as after every host restart ("cold"), then the same
//     storm again on the same process ("warm").
//
// Both servers run side by side through a round: they storm once cold,
// then -storm-warm times warm. By default both are stormed at once
// (stormTogether): each guest sends each of its requests to both servers,
// one after the other, so that both see the machine at the same moments.
// On this shared machine two storms even seconds apart differed by up to
// 30 % in a server's CPU time (its own noise: the same server, the same
// storm), which hid a few per cent either way; stormed together, the
// ratio of one storm moved by a few per cent. With -storm-apart each
// server storms alone, back to back with the other, the order
// alternating (see stormPhase). When stormed together the servers' p99s
// are alike by construction (a guest waits on both); p99 is a goal of
// -storm-apart runs.
//
// A fresh process is left alone for -storm-settle after it accepts
// connections (guests boot seconds after their host): the CPU time it
// spends meanwhile (the rest of its start, hostctl's warm-up of the cache)
// is printed as "settle CPU", apart from the storm's. With -storm-settle 0
// the storm starts as soon as the server accepts connections, and all of
// it counts.
//
// Per storm: the server's CPU time (user + system of its threads, to the
// nanosecond: serverCPU, over the storm), its heap allocations per request
// (go_memstats_mallocs_total of its metrics listener, read before and
// after, the cost of one read subtracted), requests, errors,
// p50 and p99 of the requests and the wall time; the load average at the
// start and end of each round; and per round the ratios vmeta / bare of
// CPU time, p99 and allocations per request, cold and warm. The load
// generator is this process, on the same cores as the servers. With
// VMETA_BENCH_PERF=<dir>, each storm (and each wrk run of main.go) is
// also recorded with `perf record -g` into that directory (to find where
// the server's CPU time goes; the figures of such a run are not
// comparable).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// stormRequests is how many requests a guest makes (cloud-init's, at a
// first boot with the OpenStack and EC2 readers).
const stormRequests = 25

// connMode is how a storm's guests connect.
type connMode string

const (
	// connPerRequest is cloud-init's way (22.4, Debian 12's; the same in
	// later releases): url_helper.readurl makes a requests.Session per
	// request when its caller passes none (the OpenStack and EC2 readers
	// pass none) and closes it after the response, so each request comes
	// on a new TCP connection, which the guest closes.
	connPerRequest connMode = "cloud-init"
	// connKeepAlive is one connection per guest for all its requests (a
	// client that keeps its connection: curl with several URLs, Go's
	// net/http).
	connKeepAlive connMode = "keep-alive"
)

// parseConnModes parses -storm-conns: modes separated by commas.
func parseConnModes(s string) ([]connMode, error) {
	var modes []connMode
	for _, m := range strings.Split(s, ",") {
		switch connMode(strings.TrimSpace(m)) {
		case connPerRequest:
			modes = append(modes, connPerRequest)
		case connKeepAlive:
			modes = append(modes, connKeepAlive)
		default:
			return nil, fmt.Errorf("-storm-conns: %q is neither %q nor %q", m, connPerRequest, connKeepAlive)
		}
	}
	return modes, nil
}

// stormResult is one storm against one server.
type stormResult struct {
	cpu        time.Duration
	requests   int
	errors     int64
	p50, p99   time.Duration
	wall       time.Duration
	loadBefore string
	settleCPU  time.Duration // of the fresh process before the cold storm
	mallocs    int64         // heap allocations of the server over the storm; -1: unknown
	allocBytes int64         // heap bytes allocated by the server over the storm (with mallocs)
}

// settle leaves a fresh process alone for d and returns the CPU time it
// used meanwhile.
func settle(ctx context.Context, p *proc, d time.Duration) (time.Duration, error) {
	c0, err := serverCPU(p.pid())
	if err != nil || d <= 0 {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d):
	}
	c1, err := serverCPU(p.pid())
	return c1 - c0, err
}

// stormPhase runs rounds rounds of storms with n guests, and prints the
// table and the ratios. Each round starts a fresh bare handler and a
// fresh hostctl (on the data directory the instances were published to:
// nothing cached), lets both settle, storms each once cold, then warm
// pairs times: a warm storm of each, back to back. The order within a
// round, and within each warm pair, alternates (the odd ones bare first):
// a trend in the machine's load then favours neither, and each warm ratio
// compares storms seconds apart. The goals use the median ratio of the
// rounds (cold) and of the pairs (warm).
func (e *env) stormPhase(ctx context.Context, mode connMode, together bool, n, rounds, pairs int, settleFor time.Duration) error {
	how := "one server after the other"
	if together {
		how = "both servers in each storm, each request to both"
	}
	fmt.Printf("\nboot storm (%s connections, %s): %d guests on their own addresses, %d requests each, all at once; %d rounds, each a cold storm and %d warm ones per server; fresh servers settle %s first\n",
		mode, how, n, stormRequests, rounds, pairs, settleFor)
	h, err := e.startHostctl(ctx, "storm", "")
	if err != nil {
		return err
	}
	start := time.Now()
	published, err := publish(ctx, h.api, n)
	if err != nil {
		return h.proc.failed(fmt.Errorf("publish: %w", err))
	}
	fmt.Printf("  published %d instances in %s\n", published, time.Since(start).Round(10*time.Millisecond))
	paths, routes, err := stormPaths(ctx, h.base)
	if err != nil {
		return h.proc.failed(err)
	}
	e.procs.stopSome(h.proc)
	fmt.Printf("  paths: %s\n", strings.Join(paths, " "))

	type pair struct{ bare, vmeta *stormResult }
	type row struct {
		cold pair
		warm []pair
	}
	var rows []row
	seq := 0 // storms apart so far: which server goes first alternates
	for round := 1; round <= rounds; round++ {
		fmt.Printf("  round %d/%d, load average %s\n", round, rounds, loadAverage())
		a, err := e.startBare(ctx, routes)
		if err != nil {
			return err
		}
		// The same data directory: a fresh process, the instances
		// published, nothing cached.
		h, err := e.startHostctl(ctx, "storm", "")
		if err != nil {
			return err
		}
		// Both settle at once (each one's own CPU time is measured).
		var sa, sh time.Duration
		var ea, eh error
		var wg sync.WaitGroup
		wg.Go(func() { sa, ea = settle(ctx, a.proc, settleFor) })
		wg.Go(func() { sh, eh = settle(ctx, h.proc, settleFor) })
		wg.Wait()
		if err := errors.Join(ea, eh); err != nil {
			return err
		}
		// measure storms both servers once (together, or one after
		// the other, which goes first alternating) into p.
		measure := func(p *pair) error {
			if together {
				rs, err := stormTogether(ctx, mode, []server{{a.proc, a.base}, {h.proc, h.base}}, paths, n)
				if err != nil {
					return h.proc.failed(err)
				}
				p.bare, p.vmeta = rs[0], rs[1]
				return nil
			}
			seq++
			var err error
			for k := range 2 {
				if (seq+k)%2 == 1 {
					if p.bare, err = storm(ctx, mode, a.proc, a.base, paths, n); err != nil {
						return err
					}
				} else if p.vmeta, err = storm(ctx, mode, h.proc, h.base, paths, n); err != nil {
					return h.proc.failed(err)
				}
			}
			return nil
		}
		var r row
		if err := measure(&r.cold); err != nil {
			return err
		}
		r.cold.bare.settleCPU, r.cold.vmeta.settleCPU = sa, sh
		for range pairs {
			var p pair
			if err := measure(&p); err != nil {
				return err
			}
			r.warm = append(r.warm, p)
		}
		// The storms' memory: what the GC floor (--metadata-gc-heap-floor)
		// costs shows here, where the heap grows under load.
		for _, t := range []struct {
			name string
			p    *proc
		}{{"bare", a.proc}, {"hostctl", h.proc}} {
			if st, err := procStatus(t.p.pid()); err == nil {
				fmt.Printf("    %s after the storms: VmRSS %.1f MiB, peak VmHWM %.1f MiB\n", t.name, float64(st["VmRSS"])/1024, float64(st["VmHWM"])/1024)
			}
		}
		e.procs.stopSome(a.proc)
		e.procs.stopSome(h.proc)
		rows = append(rows, r)
		var warm []string
		for _, p := range r.warm {
			warm = append(warm, fmt.Sprintf("%.2f×", durRatio(p.vmeta.cpu, p.bare.cpu)))
		}
		fmt.Printf("    vmeta/bare: cold CPU %.2f×, p99 %.2f×, allocs %.2f×, bytes %.2f×; warm CPU %s; load average at the end %s\n",
			durRatio(r.cold.vmeta.cpu, r.cold.bare.cpu), durRatio(r.cold.vmeta.p99, r.cold.bare.p99), allocRatio(r.cold.vmeta, r.cold.bare), bytesRatio(r.cold.vmeta, r.cold.bare),
			strings.Join(warm, " "), loadAverage())
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tserver\tstorm\tsettle CPU\trequests\terrors\tserver CPU\tCPU/request\tallocs/request\tB/request\tp50\tp99\twall\tload average before\t")
	line := func(round int, server, kind string, x *stormResult) {
		settled := "-"
		if kind == "cold" {
			settled = x.settleCPU.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", round, server, kind, settled, x.requests, x.errors,
			x.cpu.Round(time.Millisecond), cpuDur(x.cpu/time.Duration(max(x.requests, 1))), x.allocsPerRequest(), x.bytesPerRequest(), dur(x.p50), dur(x.p99),
			x.wall.Round(time.Millisecond), x.loadBefore)
	}
	var cold, warm []pair
	for i, r := range rows {
		line(i+1, "bare", "cold", r.cold.bare)
		line(i+1, "vmeta", "cold", r.cold.vmeta)
		cold = append(cold, r.cold)
		for k, p := range r.warm {
			line(i+1, "bare", fmt.Sprintf("warm %d", k+1), p.bare)
			line(i+1, "vmeta", fmt.Sprintf("warm %d", k+1), p.vmeta)
			warm = append(warm, p)
		}
	}
	tw.Flush()
	med := func(ps []pair, f func(p pair) float64) float64 {
		v := make([]float64, len(ps))
		for i, p := range ps {
			v[i] = f(p)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	cpu := func(p pair) float64 { return durRatio(p.vmeta.cpu, p.bare.cpu) }
	p99 := func(p pair) float64 { return durRatio(p.vmeta.p99, p.bare.p99) }
	allocs := func(p pair) float64 { return allocRatio(p.vmeta, p.bare) }
	bytes := func(p pair) float64 { return bytesRatio(p.vmeta, p.bare) }
	// A storm with failed requests (see waitConntrack) measured less
	// work: its pair is left out.
	clean := func(ps []pair) []pair {
		var ok []pair
		for _, p := range ps {
			if p.bare.errors == 0 && p.vmeta.errors == 0 {
				ok = append(ok, p)
			}
		}
		if len(ok) < len(ps) {
			fmt.Printf("  %d of %d pairs left out: requests failed\n", len(ps)-len(ok), len(ps))
		}
		if len(ok) == 0 {
			return ps
		}
		return ok
	}
	cold, warm = clean(cold), clean(warm)
	cc, cp, wc, wp := med(cold, cpu), med(cold, p99), med(warm, cpu), med(warm, p99)
	fmt.Printf("boot storm (%s connections, %s), vmeta / bare (medians of %d cold storms, %d warm pairs): cold CPU %.2f× (goal ≤ 1.10: %s), cold p99 %.2f× (≤ 1.10: %s), warm CPU %.2f× (≤ 1.05: %s), warm p99 %.2f× (≤ 1.05: %s); per request, allocations cold %.2f×, warm %.2f×, bytes cold %.2f×, warm %.2f×; load average %s\n",
		mode, how, len(cold), len(warm), cc, passMiss(cc <= 1.10), cp, passMiss(cp <= 1.10), wc, passMiss(wc <= 1.05), wp, passMiss(wp <= 1.05),
		med(cold, allocs), med(warm, allocs), med(cold, bytes), med(warm, bytes), loadAverage())
	return nil
}

// waitConntrack waits until the kernel's connection tracking table (when
// netfilter tracks connections) has room for need more connections and a
// tenth of it to spare. A storm with a connection per request opens
// 22,000 per server; each stays tracked for two minutes after it closes
// (TIME_WAIT), and when the table is full the kernel drops new
// connections' SYNs ("nf_conntrack: table full, dropping packet"): guests
// then wait seconds to connect or fail, and the storm measures something
// else.
func waitConntrack(ctx context.Context, need int) error {
	read := func(name string) (int, bool) {
		b, err := os.ReadFile("/proc/sys/net/netfilter/" + name)
		if err != nil {
			return 0, false
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		return n, err == nil
	}
	limit, ok := read("nf_conntrack_max")
	if !ok || limit <= 0 {
		return nil // no connection tracking
	}
	start, said := time.Now(), false
	for {
		count, ok := read("nf_conntrack_count")
		if !ok || count+need <= limit-limit/10 {
			if said {
				fmt.Printf("    connection tracking: %d of %d entries after %s\n", count, limit, time.Since(start).Round(time.Second))
			}
			return nil
		}
		if !said {
			fmt.Printf("    connection tracking: %d of %d entries, %d more needed; waiting for closed connections to leave it\n", count, limit, need)
			said = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// quiesce waits until process pid uses no CPU time over 100 ms (at most
// 5 s).
func quiesce(ctx context.Context, pid int) error {
	for range 50 {
		c0, err := serverCPU(pid)
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		c1, err := serverCPU(pid)
		if err != nil {
			return err
		}
		if c1-c0 < 10*time.Millisecond {
			return nil
		}
	}
	return nil
}

// allocsPerRequest renders the storm's heap allocations per request.
func (s *stormResult) allocsPerRequest() string {
	if s.mallocs < 0 || s.requests == 0 {
		return "?"
	}
	return fmt.Sprintf("%.1f", float64(s.mallocs)/float64(s.requests))
}

// bytesPerRequest renders the storm's heap bytes allocated per request.
func (s *stormResult) bytesPerRequest() string {
	if s.mallocs < 0 || s.requests == 0 {
		return "?"
	}
	return fmt.Sprintf("%.0f", float64(s.allocBytes)/float64(s.requests))
}

// allocRatio is a's allocations per request over b's (0: unknown).
func allocRatio(a, b *stormResult) float64 {
	if a.mallocs < 0 || b.mallocs <= 0 || a.requests == 0 || b.requests == 0 {
		return 0
	}
	return (float64(a.mallocs) / float64(a.requests)) / (float64(b.mallocs) / float64(b.requests))
}

// bytesRatio is a's heap bytes allocated per request over b's (0:
// unknown).
func bytesRatio(a, b *stormResult) float64 {
	if a.mallocs < 0 || b.mallocs < 0 || b.allocBytes <= 0 || a.requests == 0 || b.requests == 0 {
		return 0
	}
	return (float64(a.allocBytes) / float64(a.requests)) / (float64(b.allocBytes) / float64(b.requests))
}

// mallocs reads go_memstats_mallocs_total and
// go_memstats_alloc_bytes_total from a process's metrics URL.
func mallocs(ctx context.Context, url string) (objects, bytes int64, err error) {
	if url == "" {
		return 0, 0, errors.New("no metrics URL")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("allocations: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, fmt.Errorf("allocations: %w", err)
	}
	return parseHeapCounters(string(body))
}

// parseHeapCounters reads go_memstats_mallocs_total and
// go_memstats_alloc_bytes_total from a Prometheus text exposition.
func parseHeapCounters(body string) (objects, bytes int64, err error) {
	found := 0
	for _, l := range strings.Split(body, "\n") {
		for _, c := range []struct {
			name string
			v    *int64
		}{{"go_memstats_mallocs_total ", &objects}, {"go_memstats_alloc_bytes_total ", &bytes}} {
			if v, ok := strings.CutPrefix(l, c.name); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return 0, 0, fmt.Errorf("allocations: %q: %w", l, err)
				}
				*c.v = int64(f)
				found++
			}
		}
	}
	if found != 2 {
		return 0, 0, errors.New("allocations: no go_memstats_mallocs_total and go_memstats_alloc_bytes_total")
	}
	return objects, bytes, nil
}

func durRatio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func passMiss(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// stormPaths picks the boot requests from instance 0's answers (each must
// be 200) and returns them with the bare server's routes (its bodies).
func stormPaths(ctx context.Context, base string) ([]string, []route, error) {
	_, _, addr, _ := memInstance(0)
	c := guestClient(addr)
	defer c.CloseIdleConnections()
	paths := []string{
		"/openstack", "/openstack/2018-08-27/meta_data.json", "/openstack/2018-08-27/vendor_data.json",
		"/openstack/2018-08-27/vendor_data2.json", "/openstack/2018-08-27/network_data.json",
		"/2009-04-04/meta-data/",
	}
	listing, _, err := fetch(ctx, c, base, "/2009-04-04/meta-data/")
	if err != nil {
		return nil, nil, fmt.Errorf("boot storm paths: %w", err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(listing)), "\n") {
		if len(paths) == stormRequests {
			break
		}
		if l = strings.TrimSpace(l); l != "" {
			paths = append(paths, "/2009-04-04/meta-data/"+l)
		}
	}
	var kept []string
	var routes []route
	for _, p := range paths {
		body, ctype, err := fetch(ctx, c, base, p)
		if err != nil {
			continue // not served for this instance (no such file)
		}
		kept = append(kept, p)
		routes = append(routes, route{Path: p, ContentType: ctype, Body: string(body)})
	}
	if len(kept) < 10 {
		return nil, nil, fmt.Errorf("boot storm paths: only %d of %v answer 200", len(kept), paths)
	}
	return kept, routes, nil
}

// guestClient is an HTTP client whose connections come from addr.
func guestClient(addr interface{ AsSlice() []byte }) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: addr.AsSlice()}, Timeout: 10 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1}, Timeout: 30 * time.Second}
}

// server is one server a storm runs against: its process and base URL.
type server struct {
	p    *proc
	base string
}

// storm runs one storm of n guests against base and measures the server
// process p.
func storm(ctx context.Context, mode connMode, p *proc, base string, paths []string, n int) (*stormResult, error) {
	res, err := stormTogether(ctx, mode, []server{{p, base}}, paths, n)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// stormTogether runs one storm of n guests against every server at once:
// each guest makes each request of paths to every server in turn (guests
// alternate which server they ask first), so that the servers share the
// machine's moments — its load, its noise — and their CPU times over the
// storm compare as well as two figures taken at once can. Each server is
// measured on its own.
func stormTogether(ctx context.Context, mode connMode, servers []server, paths []string, n int) ([]*stormResult, error) {
	k := len(servers)
	res := make([]*stormResult, k)
	clients := make([][]*http.Client, n)
	for i := range n {
		_, _, addr, _ := memInstance(i)
		for range servers {
			clients[i] = append(clients[i], guestClient(addr))
		}
	}
	lat := make([][][]time.Duration, k)
	errs := make([]atomic.Int64, k)
	var firstErr atomic.Value
	// Allocations are read outside the CPU window: reading them is a
	// scrape of the server's metrics, which costs hostctl a lot (its
	// instance collector reads every instance). Two reads back to back
	// measure what one costs (subtracted below), and the storm starts
	// once the servers are quiet again (the scrape's garbage collected).
	type heap struct {
		mA, bA, m0, b0 int64
		err            error
	}
	heaps := make([]heap, k)
	for j, sv := range servers {
		res[j] = &stormResult{loadBefore: loadAverage()}
		lat[j] = make([][]time.Duration, n)
		h := &heaps[j]
		var errA error
		h.mA, h.bA, errA = mallocs(ctx, sv.p.metrics)
		h.m0, h.b0, h.err = mallocs(ctx, sv.p.metrics)
		h.err = errors.Join(errA, h.err)
	}
	if mode == connPerRequest {
		if err := waitConntrack(ctx, n*len(paths)*k); err != nil {
			return nil, err
		}
	}
	for _, sv := range servers {
		if err := quiesce(ctx, sv.p.pid()); err != nil {
			return nil, err
		}
	}
	var stops []func()
	for _, sv := range servers {
		stops = append(stops, startPerf(ctx, sv.p.pid()))
	}
	stopPerf := func() {
		for _, stop := range stops {
			stop()
		}
	}
	defer stopPerf()
	cpu0 := make([]time.Duration, k)
	for j, sv := range servers {
		var err error
		if cpu0[j], err = serverCPU(sv.p.pid()); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-gate
			for _, c := range clients[i] {
				defer c.CloseIdleConnections()
			}
			for _, path := range paths {
				for m := range k {
					j := (i + m) % k
					c := clients[i][j]
					t0 := time.Now()
					err := get(ctx, c, servers[j].base+path)
					if mode == connPerRequest {
						// As requests.Session.close: the guest
						// closes the connection after the response.
						c.CloseIdleConnections()
					}
					lat[j][i] = append(lat[j][i], time.Since(t0))
					if err != nil {
						errs[j].Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
				}
			}
		})
	}
	close(gate)
	wg.Wait()
	wall := time.Since(start)
	cpu1 := make([]time.Duration, k)
	for j, sv := range servers {
		var err error
		if cpu1[j], err = serverCPU(sv.p.pid()); err != nil {
			return nil, err
		}
	}
	stopPerf()
	for j, sv := range servers {
		r, h := res[j], heaps[j]
		m1, b1, merr1 := mallocs(ctx, sv.p.metrics)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r.wall = wall
		r.cpu = cpu1[j] - cpu0[j]
		r.mallocs = -1
		if h.err == nil && merr1 == nil {
			r.mallocs = max(m1-h.m0-(h.m0-h.mA), 0)
			r.allocBytes = max(b1-h.b0-(h.b0-h.bA), 0)
		} else {
			fmt.Printf("    allocations unknown: %v\n", errors.Join(h.err, merr1))
		}
		var all []time.Duration
		for _, l := range lat[j] {
			all = append(all, l...)
		}
		slices.Sort(all)
		r.requests = len(all)
		r.errors = errs[j].Load()
		if len(all) > 0 {
			r.p50, r.p99 = all[len(all)/2], all[len(all)*99/100]
		}
		if r.errors > 0 {
			fmt.Printf("    %d of %d requests to %s failed, first: %v\n", r.errors, r.requests, sv.base, firstErr.Load())
		}
	}
	return res, nil
}

// get GETs url and reads the body; any status but 200 is an error.
func get(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return errors.New(url + ": " + resp.Status)
	}
	return nil
}

// perfDir is where startPerf writes its profiles (VMETA_BENCH_PERF; empty:
// no profiling).
var perfDir = os.Getenv("VMETA_BENCH_PERF")

var perfSeq atomic.Int64

// startPerf records a perf profile of pid (call graphs) into perfDir while
// a storm runs, if VMETA_BENCH_PERF names a directory; the returned
// function stops it. The profile costs the server CPU time: figures of a
// profiled run are not comparable.
func startPerf(ctx context.Context, pid int) func() {
	if perfDir == "" {
		return func() {}
	}
	out := fmt.Sprintf("%s/storm-%02d-%d.data", perfDir, perfSeq.Add(1), pid)
	cmd := exec.CommandContext(ctx, "perf", "record", "-q", "-F", "2999", "-g", "-p", strconv.Itoa(pid), "-o", out)
	if err := cmd.Start(); err != nil {
		fmt.Printf("    perf: %v\n", err)
		return func() {}
	}
	time.Sleep(300 * time.Millisecond) // let perf attach
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			_ = cmd.Wait()
			fmt.Printf("    perf profile %s\n", out)
		})
	}
}
