package server

import (
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus metrics. The request counters and
// histograms are resolved once, in New, into fixed arrays indexed by
// path class and status code, so that counting a request is a few atomic
// adds: no allocation, no lock, no label lookup.
type metrics struct {
	// requests and durations are nil unless Options.Metrics.
	requestsVec *prometheus.CounterVec
	requests    [numClasses][len(statusCodes)]prometheus.Counter
	durations   [numClasses]prometheus.Observer

	cacheHits, cacheMisses prometheus.Counter
	storeErrors            prometheus.Counter
	connsRejected          prometheus.Counter
	// identFailures counts refused callers by reason (on the refusal
	// path only: an answered request costs nothing here).
	identFailures [numIdentReasons]prometheus.Counter
}

// identReason is why a caller was not identified.
type identReason int

const (
	identProxyHeaders   identReason = iota // a trusted proxy's headers missing, repeated or invalid (400)
	identProxySignature                    // a proxy request's signature wrong (403)
	identUnknownCaller                     // no instance has the caller's address or id (404)
	numIdentReasons
)

func (r identReason) String() string {
	return [...]string{"proxy_headers", "proxy_signature", "unknown_caller"}[r]
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

// durationBuckets are the upper bounds of the latency histogram, in
// seconds, from 100µs to 1s.
var durationBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
}

// NewRegistry returns a Prometheus registry holding the Go runtime and
// process collectors, for Options.Registry: a process that serves other
// metrics next to the server's (hostctl) registers them on it too.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// newMetrics creates the server's metrics and registers them on reg;
// the per-request ones only if perRequest.
func (s *Server) newMetrics(reg prometheus.Registerer, perRequest bool) *metrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &metrics{
		cacheHits:     counter("vmeta_metadata_cache_hits_total", "Requests answered from the in-memory cache."),
		cacheMisses:   counter("vmeta_metadata_cache_misses_total", "Requests that had to read the store (address or instance not cached)."),
		storeErrors:   counter("vmeta_metadata_store_errors_total", "Failed store operations (other than not found)."),
		connsRejected: counter("vmeta_metadata_connections_rejected_total", "Connections closed because their source address had too many open."),
	}
	identVec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vmeta_metadata_identification_failures_total",
		Help: "Guest requests refused because the caller was not identified, by reason (proxy_headers, proxy_signature, unknown_caller).",
	}, []string{"reason"})
	for r := range numIdentReasons {
		m.identFailures[r] = identVec.WithLabelValues(r.String())
	}
	reg.MustRegister(m.cacheHits, m.cacheMisses, m.storeErrors, m.connsRejected, identVec,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "vmeta_metadata_cached_instances", Help: "Instances whose views are cached.",
		}, func() float64 { return float64(s.cache.size()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "vmeta_metadata_store_up", Help: "1 if the last store operation succeeded, 0 if the store is unreachable.",
		}, func() float64 {
			if s.health.err.Load() != nil {
				return 0
			}
			return 1
		}),
	)
	for _, f := range s.keyFiles {
		labels := prometheus.Labels{"keys": f.name}
		reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "vmeta_metadata_key_generation", Help: "Generation of the current key of a key file (0: unknown).", ConstLabels: labels,
			}, func() float64 { return float64(f.gen.Load()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "vmeta_metadata_key_newest_generation", Help: "Highest key generation loaded from a key file (a next key being distributed included).", ConstLabels: labels,
			}, func() float64 { return float64(f.newest.Load()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "vmeta_metadata_keys", Help: "Keys loaded from a key file (current, next and prior).", ConstLabels: labels,
			}, func() float64 { return float64(f.count.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "vmeta_metadata_key_reload_errors_total", Help: "Reloads of a key file that failed (the keys loaded before stay in use).", ConstLabels: labels,
			}, func() float64 { return float64(f.errors.Load()) }),
		)
	}
	if !perRequest {
		return m
	}
	m.requestsVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vmeta_metadata_requests_total", Help: "Guest requests by path class and status code.",
	}, []string{"path_class", "code"})
	durations := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "vmeta_metadata_request_duration_seconds", Help: "Time to answer a guest request, by path class.",
		Buckets: durationBuckets,
	}, []string{"path_class"})
	for c := range numClasses {
		for i, code := range statusCodes {
			m.requests[c][i] = m.requestsVec.WithLabelValues(c.String(), strconv.Itoa(code))
		}
		m.durations[c] = durations.WithLabelValues(c.String())
	}
	reg.MustRegister(m.requestsVec, durations)
	return m
}

// observe counts a request; only with per-request metrics on.
func (m *metrics) observe(class pathClass, code int, d time.Duration) {
	if i := codeIndex(code); i >= 0 {
		m.requests[class][i].Inc()
	} else {
		m.requestsVec.WithLabelValues(class.String(), strconv.Itoa(code)).Inc()
	}
	m.durations[class].Observe(d.Seconds())
}

// MetricsHandler serves the operator endpoints, meant for a listener of
// their own that guests cannot reach: GET /metrics (Prometheus exposition
// of everything on the server's registry, see Options.Registry) and GET
// /healthz (with the store error in full).
func (s *Server) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{
		// A collector that fails (a store read at scrape time) costs its
		// own metrics, not the whole scrape.
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		s.serveHealth(w, r)
	})
	return mux
}
