package server

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

// discard is a minimal ResponseWriter, so that benchmarks measure the
// handler rather than httptest.
type discard struct {
	h      http.Header
	status int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(code int)        { d.status = code }

// benchOptions (the real clock, as in production): "bare" has metrics, the access log and the rate limit
// off; "metrics" turns metrics and the rate limit on (high enough never
// to refuse); "metrics+log" adds the access log, formatted by a text
// handler into io.Discard.
func benchOptions(mode string) Options {
	o := Options{Logger: slog.New(slog.DiscardHandler), RateLimit: -1, TokenKeys: NewKeyRing([]byte("bench-token-key"))}
	if mode != "bare" {
		o.Metrics = true
		o.RateLimit, o.RateBurst = 1e12, 1<<30
	}
	if mode == "metrics+log" {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		o.AccessLog = true
	}
	return o
}

var benchModes = []string{"bare", "metrics", "metrics+log"}

func benchServe(b *testing.B, target, remote string, header http.Header, tweak ...func(*Options)) {
	for _, mode := range benchModes {
		b.Run(mode, func(b *testing.B) {
			docs := newFakeDocs()
			docs.publish(b, richInstance(b))
			o := benchOptions(mode)
			for _, f := range tweak {
				f(&o)
			}
			s := New(docs, o)
			r := httptest.NewRequest(http.MethodGet, target, nil)
			r.RemoteAddr = remote
			for k, v := range header {
				r.Header[k] = v
			}
			w := &discard{h: http.Header{}}
			s.ServeHTTP(w, r) // fill the cache
			if w.status != 0 && w.status != 200 {
				b.Fatalf("status %d", w.status)
			}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				s.ServeHTTP(w, r)
			}
			if w.status != 0 && w.status != 200 {
				b.Fatalf("status %d", w.status)
			}
		})
	}
}

func BenchmarkServeMetaDataJSON(b *testing.B) {
	benchServe(b, "/openstack/latest/meta_data.json", richAddr, nil)
}

func BenchmarkServeEC2Hostname(b *testing.B) {
	benchServe(b, "/latest/meta-data/hostname", richAddr, nil)
}

// BenchmarkServeWithToken: a request carrying a session token (one HMAC
// to verify it).
func BenchmarkServeWithToken(b *testing.B) {
	docs := newFakeDocs()
	docs.publish(b, richInstance(b))
	s := New(docs, benchOptions("bare"))
	tok := mintToken(b, s, richAddr, "60")
	benchServe(b, "/latest/meta-data/hostname", richAddr, http.Header{hdrToken: {tok}})
}

// BenchmarkServeViaProxy: a signed proxy request (one HMAC per request to
// check the signature).
func BenchmarkServeViaProxy(b *testing.B) {
	h := http.Header{
		hdrInstanceID: {richUUID},
		hdrTenantID:   {"demo"},
		hdrSignature:  {Signature([]byte(testProxySecret), richUUID)},
	}
	benchServe(b, "/latest/meta-data/hostname", "192.0.2.10:5000", h, func(o *Options) {
		o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
		o.ProxySecrets = NewKeyRing([]byte(testProxySecret))
	})
}

// BenchmarkBuildView measures the first request of a guest (cache miss):
// decoding the tree and building every path.
func BenchmarkBuildView(b *testing.B) {
	docs := newFakeDocs()
	docs.publish(b, richInstance(b))
	s := New(docs, benchOptions("bare"))
	r := httptest.NewRequest(http.MethodGet, "/latest/meta-data/hostname", nil)
	r.RemoteAddr = richAddr
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		s.Invalidate(richUUID)
		clear(w.h)
		s.ServeHTTP(w, r)
	}
}

// BenchmarkServeParallel: cached requests from many goroutines at once
// (lock and counter contention), with metrics and the rate limit on.
func BenchmarkServeParallel(b *testing.B) {
	docs := newFakeDocs()
	docs.publish(b, richInstance(b))
	s := New(docs, benchOptions("metrics"))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := httptest.NewRequest(http.MethodGet, "/openstack/latest/meta_data.json", nil)
		r.RemoteAddr = richAddr
		w := &discard{h: http.Header{}}
		for pb.Next() {
			clear(w.h)
			s.ServeHTTP(w, r)
		}
	})
}
