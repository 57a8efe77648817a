package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The goals for our targets (b) and (c), against (a) and (d) in
// the same run.
const (
	goalVsBare   = 0.9  // req/s at least this times the bare handler's
	goalVsHegel  = 1.1  // req/s at least this times Hegel's
	goalP99Ratio = 1.2  // p99 at most this times the bare handler's p99
	goalCPURatio = 1.05 // server CPU time per request at most this times the bare handler's (issue 23 item 3)
)

// board holds the results of the throughput phase: every run of every
// target on every path.
type board struct {
	targets []*target
	rounds  int
	runs    map[string]map[string][]*result // path -> target key -> runs
}

func (b *board) add(path string, r *result) {
	if b.runs == nil {
		b.runs = map[string]map[string][]*result{}
	}
	if b.runs[path] == nil {
		b.runs[path] = map[string][]*result{}
	}
	b.runs[path][r.target] = append(b.runs[path][r.target], r)
}

// get returns a target's figures on path: with several rounds, the
// median of each figure and the sum of the errors; nil when it was not run.
func (b *board) get(path, key string) *result {
	rs := b.runs[path][key]
	if len(rs) == 0 {
		return nil
	}
	if len(rs) == 1 {
		return rs[0]
	}
	m := &result{target: key, path: path}
	var details []string
	for _, r := range rs {
		m.requests += r.requests
		m.non2xx += r.non2xx
		m.sockErrors += r.sockErrors
		if r.sockDetail != "" {
			details = append(details, r.sockDetail)
		}
	}
	m.sockDetail = strings.Join(details, "; ")
	m.cpuPerReq = time.Duration(median(rs, func(r *result) float64 { return float64(r.cpuPerReq) }))
	m.loadStart, m.loadEnd = rs[0].loadStart, rs[len(rs)-1].loadEnd
	m.rps = median(rs, func(r *result) float64 { return r.rps })
	m.p50 = time.Duration(median(rs, func(r *result) float64 { return float64(r.p50) }))
	m.p90 = time.Duration(median(rs, func(r *result) float64 { return float64(r.p90) }))
	m.p99 = time.Duration(median(rs, func(r *result) float64 { return float64(r.p99) }))
	return m
}

func median(rs []*result, of func(*result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = of(r)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// table prints one path's results and the ratios.
func (b *board) table(w io.Writer, path string, wc wrkConfig) {
	rounds := ""
	if b.rounds > 1 {
		rounds = fmt.Sprintf("; medians of %d rounds", b.rounds)
	}
	fmt.Fprintf(w, "\nGET %s  (wrk %d threads, %d connections, %s after a %s warm-up%s)\n",
		path, wc.threads, wc.connections, wrkSeconds(wc.duration), wrkSeconds(wc.warmup), rounds)
	bare, hegel := b.get(path, "a"), b.get(path, "d")
	withHegel := servesKey(b.targets, "d", path)
	rps := func(x *result) float64 { return x.rps }
	p99 := func(x *result) float64 { return x.p99.Seconds() }
	cpu := func(x *result) float64 { return float64(x.cpuPerReq) }
	tab := &table{head: []string{"target", "req/s", "p50", "p99", "errors", "÷ bare"}}
	if withHegel {
		tab.head = append(tab.head, "÷ Hegel")
	}
	tab.head = append(tab.head, "p99 ÷ bare p99", "server CPU/req", "CPU/req ÷ bare", "load 1m start→end")
	for _, t := range b.targets {
		if !serves(t, path) {
			continue
		}
		r := b.get(path, t.key)
		if r == nil {
			reason := t.skipped
			if reason == "" {
				reason = "not run"
			}
			tab.add(t.label(), "skipped: "+reason)
			continue
		}
		errs := strconv.FormatInt(r.errors(), 10)
		if r.errors() > 0 {
			errs += " !"
		}
		row := []string{t.label(), thousands(r.rps), dur(r.p50), dur(r.p99), errs, ratio(r.rps, bare, rps)}
		if withHegel {
			row = append(row, ratio(r.rps, hegel, rps))
		}
		tab.add(append(row, ratio(r.p99.Seconds(), bare, p99), cpuDur(r.cpuPerReq), ratio(cpu(r), bare, cpu),
			firstField(r.loadStart)+"→"+firstField(r.loadEnd))...)
	}
	tab.print(w)
	for _, t := range b.targets {
		if r := b.get(path, t.key); r != nil && r.errors() > 0 {
			fmt.Fprintf(w, "  ! %s: %s — the run is flagged\n", t.label(), r.errorText())
			if t.key == "b" || t.key == "c" {
				fmt.Fprint(w, "    (all load comes from one instance at 127.0.0.1: if these are 429s or refused connections,\n"+
					"    a rate or connection limit applies; see serverFlags, -hostctl-flag and -replica-flag)\n")
			}
		}
	}
}

// table is a text table: the first column left-aligned, the others
// right-aligned. A row of two cells is a label and a note, which spans
// the other columns.
type table struct {
	head []string
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) print(w io.Writer) {
	width := make([]int, len(t.head))
	for _, r := range append([][]string{t.head}, t.rows...) {
		if len(r) == 2 && len(t.head) > 2 {
			width[0] = max(width[0], utf8.RuneCountInString(r[0]))
			continue
		}
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for _, r := range append([][]string{t.head}, t.rows...) {
		var b strings.Builder
		b.WriteString("  ")
		for i, c := range r {
			pad := strings.Repeat(" ", max(0, width[i]-utf8.RuneCountInString(c)))
			switch {
			case i == 0:
				b.WriteString(c + pad)
			case len(r) == 2 && len(t.head) > 2:
				b.WriteString("  " + c)
			default:
				b.WriteString("  " + pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

func (r *result) errorText() string {
	var parts []string
	if r.non2xx > 0 {
		parts = append(parts, fmt.Sprintf("%d responses with status >= 400", r.non2xx))
	}
	if r.sockErrors > 0 {
		parts = append(parts, fmt.Sprintf("%d socket errors (%s)", r.sockErrors, r.sockDetail))
	}
	return fmt.Sprintf("%s of %d requests", strings.Join(parts, " and "), r.requests)
}

// goals prints one line per goal of the issue for path: (b) and (c)
// against the bare handler, and against Hegel where Hegel serves path.
func (b *board) goals(w io.Writer, path string) {
	bare, hegel := b.get(path, "a"), b.get(path, "d")
	fmt.Fprintf(w, "goals, GET %s:\n", path)
	rps := func(r, ref *result) float64 { return r.rps / ref.rps }
	p99 := func(r, ref *result) float64 { return r.p99.Seconds() / ref.p99.Seconds() }
	cpu := func(r, ref *result) float64 { return float64(r.cpuPerReq) / float64(ref.cpuPerReq) }
	for _, t := range b.targets {
		if (t.key != "b" && t.key != "c") || !serves(t, path) {
			continue
		}
		r := b.get(path, t.key)
		goal(w, t, r, bare, fmt.Sprintf("req/s ≥ %.1f × bare", goalVsBare), rps, func(x float64) bool { return x >= goalVsBare })
		if servesKey(b.targets, "d", path) {
			goal(w, t, r, hegel, fmt.Sprintf("req/s ≥ %.1f × Hegel", goalVsHegel), rps, func(x float64) bool { return x >= goalVsHegel })
		}
		goal(w, t, r, bare, fmt.Sprintf("p99 ≤ %.1f × bare p99", goalP99Ratio), p99, func(x float64) bool { return x <= goalP99Ratio })
		goal(w, t, r, bare, fmt.Sprintf("server CPU/request ≤ %.2f × bare", goalCPURatio), cpu, func(x float64) bool { return x <= goalCPURatio })
	}
}

// goal prints one goal: PASS or MISS; SKIP when a run is missing;
// FLAGGED when a run had errors (its figures cannot be trusted either way).
func goal(w io.Writer, t *target, r, ref *result, want string, of func(r, ref *result) float64, met func(float64) bool) {
	line := t.label() + ": " + want
	switch {
	case r == nil || ref == nil:
		fmt.Fprintf(w, "  SKIP     %s (a run is missing)\n", line)
	case r.errors() > 0 || ref.errors() > 0:
		fmt.Fprintf(w, "  FLAGGED  %s: %.3f, but a run had errors\n", line, of(r, ref))
	default:
		x, status := of(r, ref), "MISS"
		if met(x) {
			status = "PASS"
		}
		fmt.Fprintf(w, "  %-8s %s: %.3f\n", status, line, x)
	}
}

func serves(t *target, path string) bool {
	for _, p := range t.paths {
		if p == path {
			return true
		}
	}
	return false
}

func servesKey(ts []*target, key, path string) bool {
	for _, t := range ts {
		if t.key == key {
			return serves(t, path)
		}
	}
	return false
}

// memoryTable prints the memory phase.
func memoryTable(w io.Writer, rs []*memResult) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "\nresident memory (VmRSS of the serving process; \"of which files\": file-backed pages such as its binary and bolt's mmap)\n")
	tab := &table{head: []string{"target", "instances", "idle", "published, cold", "all read once", "of which files", "peak", "per instance"}}
	for _, r := range rs {
		per := "-"
		if r.warmed > 0 {
			per = fmt.Sprintf("%.1f KiB", float64(r.rssWarm-r.rssIdle)/float64(r.warmed))
		}
		tab.add(r.name, strconv.Itoa(r.published), mib(r.rssIdle), mib(r.rssCold), mib(r.rssWarm), mib(r.fileWarm), mib(r.hwm), per)
	}
	tab.print(w)
	for _, r := range rs {
		fmt.Fprintf(w, "  %s: publishing %d took %s (%.0f/s); reading each once took %s\n", r.name, r.published,
			r.publishTime.Round(10*time.Millisecond), float64(r.published)/r.publishTime.Seconds(), r.warmTime.Round(10*time.Millisecond))
		for _, n := range r.notes {
			fmt.Fprintf(w, "  ! %s: %s\n", r.name, n)
		}
	}
}

func ratio(v float64, ref *result, of func(*result) float64) string {
	if ref == nil || of(ref) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v/of(ref))
}

func dur(d time.Duration) string {
	if d >= time.Millisecond {
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
}

// cpuDur renders a CPU time per request, e.g. "21.4µs".
func cpuDur(d time.Duration) string {
	return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
}

// firstField is the first word of s (the 1-minute figure of a load
// average).
func firstField(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return "?"
}

func mib(kb int64) string { return fmt.Sprintf("%.1f MiB", float64(kb)/1024) }

// thousands renders 56444.53 as "56,445".
func thousands(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
