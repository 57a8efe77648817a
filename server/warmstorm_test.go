package server

import (
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"
)

// warmStormGuests is how many guests BenchmarkWarmStorm interleaves: as
// many as test/bench/metadata's storm, so that what one guest's request
// touches has left the CPU's caches by its next request, as it has in a
// storm (a thousand guests between two requests of one).
const warmStormGuests = 1000

// copyWriter is a ResponseWriter that copies the body, as net/http's
// buffered writer does, so that reading the body's bytes counts (a
// storm's guests each read their own bytes; the bare handler serves one
// set to all).
type copyWriter struct {
	h      http.Header
	status int
	buf    [8 << 10]byte
}

func (w *copyWriter) Header() http.Header         { return w.h }
func (w *copyWriter) Write(b []byte) (int, error) { return copy(w.buf[:], b), nil }
func (w *copyWriter) WriteHeader(code int)        { w.status = code }

// processCPU is the CPU time (user + system) the process has used.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWarmStorm (issue 23 item 3) is test/bench/metadata's warm boot
// storm without the network, against the bare handler it compares with:
// warmStormGuests guests on their own addresses each make the storm's
// requests, interleaved (every guest's first request, then every guest's
// second, ...), on a server whose cache holds them all (the warm storm),
// with the options the storm runs hostctl with (metrics and the rate
// limit on, no access log). "bare" is the bare handler of
// test/bench/metadata (a ServeMux answering guest 0's bytes for every
// guest) on the same requests.
//
// An op is one storm; ns/req and cpu-ns/req (the process's CPU time:
// what a loaded machine moves least) are per request. The storm's goal
// is vmeta's server CPU time at most 1.05 × bare's, all of net/http
// included: what vmeta adds here is that difference.
func BenchmarkWarmStorm(b *testing.B) {
	docs := newFakeDocs()
	addrs := make([]string, warmStormGuests)
	for i := range warmStormGuests {
		in, addr := memInstance(b, i)
		docs.publish(b, in)
		addrs[i] = addr
	}
	s := New(listingDocs{docs}, benchOptions("metrics"))
	warmAll(b, s)
	paths := stormPaths(b, s, addrs[0])
	bare := http.NewServeMux()
	for _, p := range paths {
		r := do(s, http.MethodGet, p, addrs[0])
		if r.status != http.StatusOK {
			b.Fatalf("%s: status %d", p, r.status)
		}
		body, ctype := []byte(r.body), r.ctype
		bare.HandleFunc("GET "+p, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", ctype)
			_, _ = w.Write(body)
		})
	}
	// One request per path, its RemoteAddr set per guest: the request a
	// server has just parsed is in the CPU's caches, the guest's data is
	// not.
	reqs := make([]*http.Request, len(paths))
	for i, p := range paths {
		reqs[i] = httptest.NewRequest(http.MethodGet, p, nil)
	}
	for _, target := range []struct {
		name string
		h    http.Handler
	}{{"bare", bare}, {"vmeta", s}} {
		b.Run(target.name, func(b *testing.B) {
			w := &copyWriter{h: http.Header{}}
			storm := func() {
				for _, r := range reqs {
					for _, addr := range addrs {
						r.RemoteAddr = addr
						clear(w.h)
						w.status = 0
						target.h.ServeHTTP(w, r)
						if w.status != 0 && w.status != http.StatusOK {
							b.Fatalf("%s from %s: status %d", r.URL.Path, r.RemoteAddr, w.status)
						}
					}
				}
			}
			storm()
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				storm()
			}
			n := float64(b.N * len(paths) * warmStormGuests)
			b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/n, "cpu-ns/req")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/req")
		})
	}
}

// TestWarmStormNoAllocs (issue 23 item 3): every request of a warm storm
// — each of the storm's paths, from guests whose views the server warmed,
// metrics and the rate limit on — allocates nothing in the handler (the
// bare handler allocates one header value per request).
func TestWarmStormNoAllocs(t *testing.T) {
	docs := newFakeDocs()
	var addrs []string
	for i := range 3 {
		in, addr := memInstance(t, i)
		docs.publish(t, in)
		addrs = append(addrs, addr)
	}
	s := New(listingDocs{docs}, benchOptions("metrics"))
	recs, err := s.docs.(instanceLister).Instances(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		s.warm(t.Context(), rec.UUID, rec.Addresses)
	}
	paths := []string{"/openstack", "/openstack/2018-08-27/meta_data.json", "/openstack/2018-08-27/network_data.json",
		"/2009-04-04/meta-data/", "/2009-04-04/meta-data/hostname", "/2009-04-04/meta-data/public-keys/", "/latest/meta-data/local-ipv4"}
	w := &copyWriter{h: http.Header{}}
	for _, p := range paths {
		r := httptest.NewRequest(http.MethodGet, p, nil)
		for _, addr := range addrs {
			r.RemoteAddr = addr
			n := testing.AllocsPerRun(20, func() {
				clear(w.h)
				w.status = 0
				s.ServeHTTP(w, r)
			})
			if w.status != 0 && w.status != http.StatusOK {
				t.Fatalf("%s from %s: status %d", p, addr, w.status)
			}
			if n != 0 {
				t.Errorf("%s from %s: %v allocations per request, want 0", p, addr, n)
			}
		}
	}
}
