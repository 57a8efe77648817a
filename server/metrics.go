package server

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// metrics are the server's counters, kept with atomics in fixed arrays so
// that counting a request costs no allocation and no lock; they are
// rendered in the Prometheus text exposition format (version 0.0.4) by
// MetricsHandler.
type metrics struct {
	requests [numClasses][len(statusCodes)]atomic.Uint64
	// otherCodes counts requests with a status outside statusCodes.
	otherMu    sync.Mutex
	otherCodes map[[2]int]uint64

	durations [numClasses]histogram

	cacheHits, cacheMisses atomic.Uint64
	storeErrors            atomic.Uint64
	connsRejected          atomic.Uint64
}

// statusCodes are the status codes the server sends.
var statusCodes = [...]int{200, 400, 401, 403, 404, 405, 409, 429, 500, 503}

func codeIndex(code int) int {
	switch code {
	case 200:
		return 0
	case 400:
		return 1
	case 401:
		return 2
	case 403:
		return 3
	case 404:
		return 4
	case 405:
		return 5
	case 409:
		return 6
	case 429:
		return 7
	case 500:
		return 8
	case 503:
		return 9
	}
	return -1
}

// durationBuckets are the upper bounds of the latency histogram, from
// 100µs to 1s.
var durationBuckets = [...]time.Duration{
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second,
}

type histogram struct {
	counts [len(durationBuckets) + 1]atomic.Uint64 // per bucket, not cumulative; the last is +Inf
	sumNs  atomic.Uint64
}

func (h *histogram) observe(d time.Duration) {
	i := 0
	for i < len(durationBuckets) && d > durationBuckets[i] {
		i++
	}
	h.counts[i].Add(1)
	if d > 0 {
		h.sumNs.Add(uint64(d))
	}
}

func (m *metrics) observe(class pathClass, code int, d time.Duration) {
	if i := codeIndex(code); i >= 0 {
		m.requests[class][i].Add(1)
	} else {
		m.otherMu.Lock()
		if m.otherCodes == nil {
			m.otherCodes = map[[2]int]uint64{}
		}
		m.otherCodes[[2]int{int(class), code}]++
		m.otherMu.Unlock()
	}
	m.durations[class].observe(d)
}

// writeMetrics renders every metric in the text exposition format.
func (s *Server) writeMetrics(w io.Writer) error {
	m := s.metrics
	b := bufio.NewWriter(w)
	family := func(name, typ, help string) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}

	family("vmeta_metadata_requests_total", "counter", "Guest requests by path class and status code.")
	type series struct {
		class pathClass
		code  int
		n     uint64
	}
	var rows []series
	for c := range numClasses {
		for i, code := range statusCodes {
			if n := m.requests[c][i].Load(); n > 0 {
				rows = append(rows, series{c, code, n})
			}
		}
	}
	m.otherMu.Lock()
	for k, n := range m.otherCodes {
		rows = append(rows, series{pathClass(k[0]), k[1], n})
	}
	m.otherMu.Unlock()
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].class != rows[j].class {
			return rows[i].class < rows[j].class
		}
		return rows[i].code < rows[j].code
	})
	for _, r := range rows {
		fmt.Fprintf(b, "vmeta_metadata_requests_total{path_class=%q,code=\"%d\"} %d\n", r.class.String(), r.code, r.n)
	}

	family("vmeta_metadata_request_duration_seconds", "histogram", "Time to answer a guest request, by path class.")
	for c := range numClasses {
		h := &m.durations[c]
		var counts [len(durationBuckets) + 1]uint64
		var total uint64
		for i := range counts {
			counts[i] = h.counts[i].Load()
			total += counts[i]
		}
		if total == 0 {
			continue
		}
		var cum uint64
		for i, ub := range durationBuckets {
			cum += counts[i]
			fmt.Fprintf(b, "vmeta_metadata_request_duration_seconds_bucket{path_class=%q,le=%q} %d\n", c.String(), formatFloat(ub.Seconds()), cum)
		}
		fmt.Fprintf(b, "vmeta_metadata_request_duration_seconds_bucket{path_class=%q,le=\"+Inf\"} %d\n", c.String(), total)
		fmt.Fprintf(b, "vmeta_metadata_request_duration_seconds_sum{path_class=%q} %s\n", c.String(), formatFloat(time.Duration(h.sumNs.Load()).Seconds()))
		fmt.Fprintf(b, "vmeta_metadata_request_duration_seconds_count{path_class=%q} %d\n", c.String(), total)
	}

	family("vmeta_metadata_cache_hits_total", "counter", "Requests answered from the in-memory cache.")
	fmt.Fprintf(b, "vmeta_metadata_cache_hits_total %d\n", m.cacheHits.Load())
	family("vmeta_metadata_cache_misses_total", "counter", "Requests that had to read the store (address or instance not cached).")
	fmt.Fprintf(b, "vmeta_metadata_cache_misses_total %d\n", m.cacheMisses.Load())
	family("vmeta_metadata_store_errors_total", "counter", "Failed store operations (other than not found).")
	fmt.Fprintf(b, "vmeta_metadata_store_errors_total %d\n", m.storeErrors.Load())
	family("vmeta_metadata_cached_instances", "gauge", "Instances whose views are cached.")
	fmt.Fprintf(b, "vmeta_metadata_cached_instances %d\n", s.cache.size())
	family("vmeta_metadata_store_up", "gauge", "1 if the last store operation succeeded, 0 if the store is unreachable.")
	up := 1
	if s.health.err.Load() != nil {
		up = 0
	}
	fmt.Fprintf(b, "vmeta_metadata_store_up %d\n", up)
	family("vmeta_metadata_connections_rejected_total", "counter", "Connections closed because their source address had too many open.")
	fmt.Fprintf(b, "vmeta_metadata_connections_rejected_total %d\n", m.connsRejected.Load())
	return b.Flush()
}

func formatFloat(f float64) string {
	if math.IsInf(f, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// MetricsHandler serves the operator endpoints, meant for a listener of
// their own that guests cannot reach: GET /metrics (Prometheus text
// format) and GET /healthz (with the store error in full).
func (s *Server) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_ = s.writeMetrics(w)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		s.serveHealth(w, r, true)
	})
	return mux
}
