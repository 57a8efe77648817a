package server

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmeta/vmeta/internal/testenv"
)

// scrape returns what GET /metrics answers on the operator handler.
func scrape(t *testing.T, s *Server) string {
	t.Helper()
	r := do(s.MetricsHandler(), "GET", "/metrics", "127.0.0.1:1")
	if r.status != 200 || !strings.HasPrefix(r.ctype, "text/plain; version=0.0.4") {
		t.Fatalf("/metrics: %d %q", r.status, r.ctype)
	}
	return r.body
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*")*)?\})? (\S+)$`)
	helpLine   = regexp.MustCompile(`^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+$`)
	typeLine   = regexp.MustCompile(`^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$`)
)

var labelPair = regexp.MustCompile(`[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"`)

// canonicalKey writes a sample's labels in name order (the exposition
// format leaves their order free), so that a key can be looked up
// whatever order a test writes it in.
func canonicalKey(key string) string {
	name, labels, ok := strings.Cut(key, "{")
	if !ok {
		return key
	}
	pairs := labelPair.FindAllString(strings.TrimSuffix(labels, "}"), -1)
	sort.Strings(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// parseExposition checks the Prometheus text format line by line (every
// sample belongs to a family declared by TYPE before it, values are
// floats) and returns the samples by their full name with labels.
func parseExposition(t *testing.T, text string) map[string]float64 {
	t.Helper()
	samples := map[string]float64{}
	types := map[string]string{}
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		switch {
		case helpLine.MatchString(line):
		case typeLine.MatchString(line):
			m := typeLine.FindStringSubmatch(line)
			if _, dup := types[m[1]]; dup {
				t.Errorf("line %d: TYPE %s twice", i+1, m[1])
			}
			types[m[1]] = m[2]
		case sampleLine.MatchString(line):
			m := sampleLine.FindStringSubmatch(line)
			name := m[1]
			family := name
			if types[family] == "" {
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if f, ok := strings.CutSuffix(name, suf); ok && (types[f] == "histogram" || types[f] == "summary" && suf != "_bucket") {
						family = f
					}
				}
			}
			if types[family] == "" {
				t.Errorf("line %d: sample of undeclared family: %q", i+1, line)
			}
			v, err := strconv.ParseFloat(m[4], 64)
			if err != nil && m[4] != "+Inf" {
				t.Errorf("line %d: value %q", i+1, m[4])
			}
			key := canonicalKey(name + m[2])
			if _, dup := samples[key]; dup {
				t.Errorf("line %d: sample %s twice", i+1, key)
			}
			samples[key] = v
		default:
			t.Errorf("line %d is not valid exposition format: %q", i+1, line)
		}
	}
	return samples
}

func TestMetricsExposition(t *testing.T) {
	s := proxySetup(t, nil)
	for _, tc := range []struct {
		method, target, remote string
		header                 http.Header
		body                   string
	}{
		{"GET", "/openstack/latest/meta_data.json", richAddr, nil, ""},
		{"GET", "/openstack/latest/meta_data.json", richAddr, nil, ""},
		{"GET", "/openstack/latest/network_data.json", richAddr, nil, ""},
		{"GET", "/latest/meta-data/hostname", richAddr, nil, ""},
		{"GET", "/latest/meta-data/", richAddr, nil, ""},
		{"GET", "/openstack", richAddr, nil, ""},
		{"GET", "/", richAddr, nil, ""},
		{"GET", "/latest/meta-data/nope", richAddr, nil, ""},
		{"GET", "/nonsense", richAddr, nil, ""},
		{"GET", "/healthz", richAddr, nil, ""},
		{"POST", "/openstack/latest/password", richAddr, nil, testPassword},
		{"POST", "/openstack/latest/password", richAddr, nil, testPassword},
		{"PUT", "/latest/api/token", richAddr, http.Header{"X-aws-ec2-metadata-token-ttl-seconds": {"10"}}, ""},
		{"GET", "/latest/meta-data/hostname", proxyPeer, proxyHdr(richUUID, "demo", "bad"), ""},
		{"GET", "/latest/meta-data/hostname", "198.51.100.99:1", nil, ""}, // an unknown address
		{"GET", "/latest/meta-data/hostname", proxyPeer, nil, ""},         // a proxy's headers missing
		{"DELETE", "/latest/meta-data/hostname", richAddr, nil, ""},
	} {
		r := req(s, tc.method, tc.target, tc.remote, tc.header, tc.body)
		if tc.method == "PUT" {
			rememberToken(r.body)
		}
	}
	text := scrape(t, s)
	samples := parseExposition(t, text)
	want := map[string]float64{
		`vmeta_metadata_requests_total{path_class="openstack_meta_data",code="200"}`:                 2,
		`vmeta_metadata_requests_total{path_class="openstack_other",code="200"}`:                     1,
		`vmeta_metadata_requests_total{path_class="ec2",code="200"}`:                                 1,
		`vmeta_metadata_requests_total{path_class="ec2",code="404"}`:                                 2, // unknown key, unknown address
		`vmeta_metadata_requests_total{path_class="ec2",code="403"}`:                                 1,
		`vmeta_metadata_requests_total{path_class="ec2",code="405"}`:                                 1,
		`vmeta_metadata_requests_total{path_class="listing",code="200"}`:                             3,
		`vmeta_metadata_requests_total{path_class="other",code="404"}`:                               2, // /nonsense, /healthz (operator listener only)
		`vmeta_metadata_requests_total{path_class="password",code="200"}`:                            1,
		`vmeta_metadata_requests_total{path_class="password",code="409"}`:                            1,
		`vmeta_metadata_requests_total{path_class="token",code="200"}`:                               1,
		`vmeta_metadata_request_duration_seconds_count{path_class="openstack_meta_data"}`:            2,
		`vmeta_metadata_request_duration_seconds_bucket{path_class="openstack_meta_data",le="+Inf"}`: 2,
		`vmeta_metadata_store_errors_total`:                                                          0,
		`vmeta_metadata_cached_instances`:                                                            1,
		`vmeta_metadata_store_up`:                                                                    1,
		`vmeta_metadata_connections_rejected_total`:                                                  0,
		`vmeta_metadata_requests_total{path_class="ec2",code="400"}`:                                 1,
		`vmeta_metadata_identification_failures_total{reason="proxy_headers"}`:                       1,
		`vmeta_metadata_identification_failures_total{reason="proxy_signature"}`:                     1,
		`vmeta_metadata_identification_failures_total{reason="unknown_caller"}`:                      1,
	}
	for k, v := range want {
		if got, ok := samples[canonicalKey(k)]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	if samples["vmeta_metadata_cache_misses_total"] < 1 || samples["vmeta_metadata_cache_hits_total"] < 5 {
		t.Errorf("cache hits %v, misses %v", samples["vmeta_metadata_cache_hits_total"], samples["vmeta_metadata_cache_misses_total"])
	}
	// Buckets are cumulative and end at the count.
	prev := -1.0
	for _, le := range []string{"0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "+Inf"} {
		v, ok := samples[canonicalKey(`vmeta_metadata_request_duration_seconds_bucket{path_class="listing",le="`+le+`"}`)]
		if !ok || v < prev {
			t.Errorf("bucket le=%s: %v (present %v) after %v", le, v, ok, prev)
		}
		prev = v
	}
	if prev != samples[`vmeta_metadata_request_duration_seconds_count{path_class="listing"}`] {
		t.Errorf("+Inf bucket %v != count", prev)
	}
	for _, fam := range []string{"vmeta_metadata_requests_total counter", "vmeta_metadata_request_duration_seconds histogram", "vmeta_metadata_cache_hits_total counter", "vmeta_metadata_cache_misses_total counter", "vmeta_metadata_store_errors_total counter", "vmeta_metadata_cached_instances gauge"} {
		if !strings.Contains(text, "# TYPE "+fam+"\n") {
			t.Errorf("no TYPE line for %s", fam)
		}
	}
	// The operator handler serves nothing else.
	if r := do(s.MetricsHandler(), "GET", "/latest/meta-data/hostname", richAddr); r.status != 404 {
		t.Errorf("metadata on the metrics handler: %d", r.status)
	}
	for _, sec := range []string{testPassword, testProxySecret, secretTag} {
		if strings.Contains(text, sec) {
			t.Errorf("metrics hold a secret")
		}
	}
}

// TestMetricsOff: without Options.Metrics requests are not counted (the
// cache counters still are).
func TestMetricsOff(t *testing.T) {
	docs := newFakeDocs()
	docs.publish(t, richInstance(t))
	o := testOptions(at("2026-01-01"))
	o.Metrics = false
	s := New(docs, o)
	get(s, "/latest/meta-data/hostname")
	samples := parseExposition(t, scrape(t, s))
	for k := range samples {
		if strings.HasPrefix(k, "vmeta_metadata_requests_total") || strings.HasPrefix(k, "vmeta_metadata_request_duration") {
			t.Errorf("counted with metrics off: %s", k)
		}
	}
	if samples["vmeta_metadata_cache_misses_total"] != 1 {
		t.Errorf("cache misses %v", samples["vmeta_metadata_cache_misses_total"])
	}
}

func TestAccessLog(t *testing.T) {
	for _, on := range []bool{true, false} {
		var buf bytes.Buffer
		docs := newFakeDocs()
		docs.publish(t, richInstance(t))
		o := testOptions(at("2026-01-01"))
		o.AccessLog = on
		o.Logger = slog.New(slog.NewJSONHandler(&syncWriter{w: &buf, also: &testLogs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
		s := New(docs, o)
		tok := mintToken(t, s, richAddr, "60")
		req(s, "GET", "/openstack/latest/user_data?token="+tok+"&x="+secretTag, richAddr, http.Header{"X-aws-ec2-metadata-token": {tok}, "Authorization": {"Bearer " + testProxySecret}}, "")
		req(s, "POST", "/openstack/latest/password", richAddr, nil, testPassword)
		req(s, "GET", "/openstack/latest/password", richAddr, nil, "")
		logs := buf.String()
		n := strings.Count(logs, `"msg":"metadata request"`)
		if !on {
			if n != 0 {
				t.Errorf("access log off, yet %d lines", n)
			}
			continue
		}
		if n != 4 {
			t.Fatalf("%d access log lines, want 4:\n%s", n, logs)
		}
		for _, want := range []string{`"method":"GET"`, `"path":"/openstack/latest/user_data"`, `"class":"openstack_other"`, `"status":200`, `"instance":"` + richUUID + `"`, `"via":"address"`, `"class":"password"`, `"class":"token"`} {
			if !strings.Contains(logs, want) {
				t.Errorf("access log lacks %s:\n%s", want, logs)
			}
		}
		for _, never := range []string{tok, testPassword, secretTag, testProxySecret, "Bearer", "token=", "cloud-config"} {
			if strings.Contains(logs, never) {
				t.Errorf("access log holds %q:\n%s", never, logs)
			}
		}
	}
}

// syncWriter writes to w and also to the test-wide buffer (so TestMain
// checks these lines too).
type syncWriter struct {
	w    *bytes.Buffer
	also *testenv.SyncBuffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.also.Write(p)
	return s.w.Write(p)
}

// TestMetricsRuntimeCollectors: the default registry carries the Go and
// process collectors; a registry given in Options is served whole (what
// else the caller put on it too).
func TestMetricsRuntimeCollectors(t *testing.T) {
	s := New(newFakeDocs(), testOptions(at("2026-01-01")))
	samples := parseExposition(t, scrape(t, s))
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total", "vmeta_metadata_store_up"} {
		if _, ok := samples[name]; !ok {
			t.Errorf("default registry: no %s", name)
		}
	}

	reg := prometheus.NewRegistry()
	extra := prometheus.NewCounter(prometheus.CounterOpts{Name: "vmeta_test_extra_total", Help: "A metric of the caller."})
	extra.Add(3)
	reg.MustRegister(extra)
	o := testOptions(at("2026-01-01"))
	o.Registry = reg
	s = New(newFakeDocs(), o)
	get(s, "/latest/meta-data/hostname")
	samples = parseExposition(t, scrape(t, s))
	if samples["vmeta_test_extra_total"] != 3 {
		t.Errorf("caller's metric: %v", samples["vmeta_test_extra_total"])
	}
	if samples[canonicalKey(`vmeta_metadata_requests_total{path_class="ec2",code="404"}`)] != 1 {
		t.Errorf("server's metrics missing from the caller's registry")
	}
	if _, ok := samples["go_goroutines"]; ok {
		t.Errorf("the server added the Go collector to the caller's registry")
	}
}

// TestMetricsNoAllocs: counting a request allocates nothing, and a whole
// cached request costs no more allocations with metrics on than off.
func TestMetricsNoAllocs(t *testing.T) {
	serve := func(mode string) float64 {
		docs := newFakeDocs()
		docs.publish(t, richInstance(t))
		s := New(docs, benchOptions(mode))
		r := httptest.NewRequest(http.MethodGet, "/openstack/latest/meta_data.json", nil)
		r.RemoteAddr = richAddr
		w := &discard{h: http.Header{}}
		s.ServeHTTP(w, r) // fill the cache
		if w.status != 0 && w.status != 200 {
			t.Fatalf("%s: status %d", mode, w.status)
		}
		if mode == "metrics" {
			if n := testing.AllocsPerRun(100, func() { s.metrics.observe(classEC2, 200, time.Millisecond) }); n != 0 {
				t.Errorf("observe: %v allocations", n)
			}
		}
		return testing.AllocsPerRun(100, func() {
			clear(w.h)
			s.ServeHTTP(w, r)
		})
	}
	bare, withMetrics := serve("bare"), serve("metrics")
	if withMetrics > bare {
		t.Errorf("a request allocates %v times with metrics, %v without", withMetrics, bare)
	}
}
