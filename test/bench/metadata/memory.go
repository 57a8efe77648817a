package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/client"
)

// Parallelism of the memory phase: applies in flight on the admin socket,
// and warming requests in flight.
const (
	publishWorkers = 16
	warmWorkers    = 16
	progressEvery  = 1000
)

// memResult is the memory of one server with n published instances.
type memResult struct {
	name                      string
	published                 int
	publishTime, warmTime     time.Duration
	warmed                    int
	rssIdle, rssCold, rssWarm int64 // kB
	fileWarm                  int64 // kB of rssWarm that are file-backed (binary, bolt's mmap)
	hwm                       int64 // kB, peak resident size
	notes                     []string
}

// memoryPhase measures the resident memory of a fresh embedded-store
// daemon and (when built) a fresh Redis replica, each cold with n
// published instances and after every instance was read once.
func (e *env) memoryPhase(ctx context.Context, n int, limit time.Duration, redisURL string) ([]*memResult, error) {
	var out []*memResult

	fmt.Printf("\nmemory: (b) fresh hostctl daemon, embedded store, %d instances\n", n)
	h, err := e.startHostctl(ctx, "mem-embedded", "")
	if err != nil {
		return out, err
	}
	r, err := measureMemory(ctx, "(b) vmeta, embedded store", h.proc, h.api, h.base, n, limit)
	e.procs.stopSome(h.proc)
	if r != nil {
		out = append(out, r)
	}
	if err != nil {
		return out, err
	}

	if e.bins.replica == "" {
		return out, nil
	}
	// Database 1: the throughput phase's instance lives in database 0.
	fmt.Printf("\nmemory: (c) fresh replica on Redis, %d instances published by a hostctl daemon\n", n)
	pub, err := e.startHostctl(ctx, "mem-publisher", redisURL+"/1")
	if err != nil {
		return out, err
	}
	rep, base, err := e.startReplica(ctx, "mem-replica", redisURL+"/1")
	if err != nil {
		return out, err
	}
	r, err = measureMemory(ctx, "(c) vmeta replica, Redis", rep, pub.api, base, n, limit)
	e.procs.stopSome(rep, pub.proc)
	if r != nil {
		out = append(out, r)
	}
	return out, err
}

// measureMemory publishes n instances through publisher, then reads each
// once from its own source address at base, and samples the resident
// memory of p before publishing, after publishing and after reading.
// Publishing and reading are each bounded by limit; what did not finish
// in time is noted, not an error.
func measureMemory(ctx context.Context, name string, p *proc, publisher *client.Client, base string, n int, limit time.Duration) (*memResult, error) {
	r := &memResult{name: name}
	var err error
	if r.rssIdle, err = rss(p.pid()); err != nil {
		return nil, err
	}

	pctx, cancel := context.WithTimeout(ctx, limit)
	start := time.Now()
	r.published, err = publish(pctx, publisher, n)
	r.publishTime = time.Since(start)
	cancel()
	switch {
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		r.notes = append(r.notes, fmt.Sprintf("publishing stopped at the -memory-timeout (%s) after %d of %d", limit, r.published, n))
	case err != nil:
		return nil, p.failed(fmt.Errorf("publish: %w", err))
	}
	fmt.Printf("  published %d instances in %s (%.0f/s, %d applies in flight on the admin socket)\n",
		r.published, r.publishTime.Round(10*time.Millisecond), float64(r.published)/r.publishTime.Seconds(), publishWorkers)
	if r.rssCold, err = rss(p.pid()); err != nil {
		return nil, err
	}

	wctx, cancel := context.WithTimeout(ctx, limit)
	start = time.Now()
	r.warmed, err = warm(wctx, base, r.published)
	r.warmTime = time.Since(start)
	cancel()
	switch {
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		r.notes = append(r.notes, fmt.Sprintf("reading stopped at the -memory-timeout (%s) after %d of %d", limit, r.warmed, r.published))
	case err != nil:
		return nil, p.failed(fmt.Errorf("warm the cache: %w", err))
	}
	fmt.Printf("  read meta_data.json once from each of %d source addresses in %s\n", r.warmed, r.warmTime.Round(10*time.Millisecond))
	st, err := procStatus(p.pid())
	if err != nil {
		return nil, err
	}
	r.rssWarm, r.fileWarm, r.hwm = st["VmRSS"], st["RssFile"]+st["RssShmem"], st["VmHWM"]
	return r, nil
}

// publish applies the memory phase's instances 0..n-1 with
// publishWorkers applies in flight and returns how many were published.
func publish(ctx context.Context, c *client.Client, n int) (int, error) {
	return parallel(ctx, n, publishWorkers, "published", func(ctx context.Context, i int) error {
		name, _, _, spec := memInstance(i)
		if _, err := c.Apply(ctx, spec); err != nil {
			return fmt.Errorf("apply %s: %w", name, err)
		}
		return nil
	})
}

// warm reads /openstack/latest/meta_data.json once as each of the
// instances 0..n-1, from its own source address, and checks that each
// gets its own document.
func warm(ctx context.Context, base string, n int) (int, error) {
	return parallel(ctx, n, warmWorkers, "read", func(ctx context.Context, i int) error {
		name, uuid, addr, _ := memInstance(i)
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: addr.AsSlice()}, Timeout: 5 * time.Second}
		tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		body, _, err := fetch(ctx, &http.Client{Transport: tr}, base, pathMetaData)
		if err == nil {
			err = checkMetaData(uuid, "")(body)
		}
		if err != nil {
			return fmt.Errorf("%s from %s: %w", name, addr, err)
		}
		return nil
	})
}

// parallel runs do(0..n-1) on workers goroutines, printing progress every
// progressEvery, and returns how many succeeded; it stops at the first
// error or when ctx ends.
func parallel(ctx context.Context, n, workers int, verb string, do func(context.Context, int) error) (int, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next, done atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := do(ctx, i); err != nil {
					if ctx.Err() == nil {
						cancel(err)
					}
					return
				}
				if d := done.Add(1); d%progressEvery == 0 {
					fmt.Printf("    %s %d/%d (%s)\n", verb, d, n, time.Since(start).Round(100*time.Millisecond))
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return int(done.Load()), err
	}
	return int(done.Load()), nil
}

// rss returns a process's resident set size (VmRSS) in kB.
func rss(pid int) (int64, error) {
	st, err := procStatus(pid)
	return st["VmRSS"], err
}

// procStatus returns the kB figures of /proc/PID/status (VmRSS, VmHWM,
// RssAnon, RssFile, …).
func procStatus(pid int) (map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, fmt.Errorf("resident memory: %w", err)
	}
	defer f.Close()
	st := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		num, isKB := strings.CutSuffix(strings.TrimSpace(val), " kB")
		if !ok || !isKB {
			continue
		}
		kb, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("resident memory: %s %q: %w", key, val, err)
		}
		st[key] = kb
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("resident memory: %w", err)
	}
	if st["VmRSS"] == 0 {
		return nil, fmt.Errorf("resident memory: no VmRSS in /proc/%d/status", pid)
	}
	return st, nil
}
