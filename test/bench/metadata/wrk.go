package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// wrkConfig is the load every target gets: the same wrk binary, threads,
// connections and duration.
type wrkConfig struct {
	bin         string
	threads     int
	connections int
	duration    time.Duration
	warmup      time.Duration
}

// result is one wrk run.
type result struct {
	target, path string
	rps          float64
	p50, p90     time.Duration
	p99          time.Duration
	requests     int64
	non2xx       int64 // wrk: "Non-2xx or 3xx responses" (status >= 400)
	sockErrors   int64 // connect + read + write + timeout
	sockDetail   string
	// cpu is the CPU time (user + system) the server process spent
	// during the measured run, cpuPerReq that per request; loadStart and
	// loadEnd the machine's load average (1, 5, 15 minutes) as it began
	// and ended.
	cpu, cpuPerReq     time.Duration
	loadStart, loadEnd string
}

// errors is the number of failed requests of the run.
func (r *result) errors() int64 { return r.non2xx + r.sockErrors }

// wrkSeconds renders a duration for wrk's -d, which takes whole seconds.
func wrkSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int(d.Round(time.Second)/time.Second))) + "s"
}

// run loads url, served by the process pid: a warm-up run whose figures
// are dropped, then the measured run with --latency, over which the
// process's CPU time and the machine's load average are read.
func (c wrkConfig) run(ctx context.Context, url string, pid int) (*result, error) {
	if c.warmup > 0 {
		if _, err := c.exec(ctx, url, c.warmup, false); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	loadStart := loadAverage()
	cpuStart, err := serverCPU(pid)
	if err != nil {
		return nil, err
	}
	out, err := c.exec(ctx, url, c.duration, true)
	if err != nil {
		return nil, err
	}
	cpuEnd, err := serverCPU(pid)
	if err != nil {
		return nil, err
	}
	r, err := parseWrk(out)
	if err != nil {
		return nil, fmt.Errorf("%w; wrk printed:\n%s", err, out)
	}
	r.cpu, r.loadStart, r.loadEnd = cpuEnd-cpuStart, loadStart, loadAverage()
	if r.requests > 0 {
		r.cpuPerReq = r.cpu / time.Duration(r.requests)
	}
	return r, nil
}

func (c wrkConfig) exec(ctx context.Context, url string, d time.Duration, latency bool) (string, error) {
	args := []string{"-t", strconv.Itoa(c.threads), "-c", strconv.Itoa(c.connections), "-d", wrkSeconds(d)}
	if latency {
		args = append(args, "--latency")
	}
	cmd := exec.CommandContext(ctx, c.bin, append(args, url)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("wrk %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

var (
	wrkPercentile = regexp.MustCompile(`^\s*(50|90|99)(?:\.0+)?%\s+(\S+)\s*$`)
	wrkRequests   = regexp.MustCompile(`^\s*(\d+) requests in `)
	wrkNon2xx     = regexp.MustCompile(`^\s*Non-2xx or 3xx responses:\s*(\d+)`)
	wrkSocket     = regexp.MustCompile(`^\s*Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkRPS        = regexp.MustCompile(`^Requests/sec:\s*([0-9.]+)`)
)

// parseWrk reads the report of `wrk --latency`:
//
//	  Latency Distribution
//	     50%    1.06ms
//	     …
//	     99%   15.88ms
//	  174986 requests in 3.10s, 20.19MB read
//	  Non-2xx or 3xx responses: 12
//	  Socket errors: connect 0, read 3, write 0, timeout 0
//	Requests/sec:  56444.53
//
// Latencies are printed in us, ms, s, m or h, which time.ParseDuration
// reads as they are.
func parseWrk(out string) (*result, error) {
	r := &result{}
	var seen struct{ p50, p99, rps bool }
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if m := wrkPercentile.FindStringSubmatch(line); m != nil {
			d, err := time.ParseDuration(m[2])
			if err != nil {
				return nil, fmt.Errorf("wrk latency %q: %w", m[2], err)
			}
			switch m[1] {
			case "50":
				r.p50, seen.p50 = d, true
			case "90":
				r.p90 = d
			case "99":
				r.p99, seen.p99 = d, true
			}
		} else if m := wrkRequests.FindStringSubmatch(line); m != nil {
			r.requests, _ = strconv.ParseInt(m[1], 10, 64)
		} else if m := wrkNon2xx.FindStringSubmatch(line); m != nil {
			r.non2xx, _ = strconv.ParseInt(m[1], 10, 64)
		} else if m := wrkSocket.FindStringSubmatch(line); m != nil {
			var parts []string
			for i, kind := range []string{"connect", "read", "write", "timeout"} {
				n, _ := strconv.ParseInt(m[i+1], 10, 64)
				r.sockErrors += n
				if n > 0 {
					parts = append(parts, fmt.Sprintf("%s %d", kind, n))
				}
			}
			r.sockDetail = strings.Join(parts, ", ")
		} else if m := wrkRPS.FindStringSubmatch(line); m != nil {
			v, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				return nil, fmt.Errorf("wrk requests/s %q: %w", m[1], err)
			}
			r.rps, seen.rps = v, true
		}
	}
	if !seen.p50 || !seen.p99 || !seen.rps {
		return nil, fmt.Errorf("wrk output without requests/s or the 50%%/99%% latencies")
	}
	return r, nil
}
