package server

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// stormGuests is how many instances BenchmarkColdStorm boots.
const stormGuests = 100

// stormPaths are the boot requests of test/bench/metadata's storm: the
// OpenStack files cloud-init's reader fetches, the EC2 meta-data listing
// and the entries it names (up to 25 requests).
func stormPaths(b *testing.B, s *Server, addr string) []string {
	b.Helper()
	paths := []string{
		"/openstack", "/openstack/2018-08-27/meta_data.json", "/openstack/2018-08-27/vendor_data.json",
		"/openstack/2018-08-27/vendor_data2.json", "/openstack/2018-08-27/network_data.json",
		"/2009-04-04/meta-data/",
	}
	r := do(s, http.MethodGet, "/2009-04-04/meta-data/", addr)
	if r.status != http.StatusOK {
		b.Fatalf("meta-data listing: status %d", r.status)
	}
	for _, l := range strings.Split(r.body, "\n") {
		if len(paths) == 25 {
			break
		}
		if l != "" {
			paths = append(paths, "/2009-04-04/meta-data/"+l)
		}
	}
	return paths
}

// BenchmarkColdStorm (issue 23 item 3) is test/bench/metadata's boot storm
// without the network: stormGuests instances, each booted once from its
// own source address with the storm's requests, against a fresh server
// (its cache empty: every host restart, every replica start). Options as
// the storm runs hostctl (metrics on, the rate limit on but never
// refusing, no access log).
//
//   - cold: nothing read before the guests ask (their first requests read
//     the store, decode the trees, build the directories);
//   - warmed: the server has warmed its cache as Run does when it starts
//     (warm.go: the store's instances listed and read; not counted);
//   - second: the same guests boot again on the same server;
//   - warming: what warmed did not count, the warm-up itself (per
//     request of the storm that follows it, to compare with cold).
//
// An op is one storm; allocs/req and B/req are per request (what the
// ratio to a bare handler in test/bench/metadata is made of, without the
// noise of a shared machine). The goal is cold and warmed as cheap as
// second.
func BenchmarkColdStorm(b *testing.B) {
	docs := newFakeDocs()
	addrs := make([]string, stormGuests)
	for i := range stormGuests {
		in, addr := memInstance(b, i)
		docs.publish(b, in)
		addrs[i] = addr
	}
	paths := stormPaths(b, New(docs, benchOptions("metrics")), addrs[0])
	reqs := make([][]*http.Request, stormGuests)
	for i, addr := range addrs {
		for _, p := range paths {
			r := httptest.NewRequest(http.MethodGet, p, nil)
			r.RemoteAddr = addr
			reqs[i] = append(reqs[i], r)
		}
	}
	w := &discard{h: http.Header{}}
	boot := func(s *Server) {
		for _, guest := range reqs {
			for _, r := range guest {
				clear(w.h)
				w.status = 0
				s.ServeHTTP(w, r)
				if w.status != 0 && w.status != http.StatusOK {
					b.Fatalf("%s from %s: status %d", r.URL.Path, r.RemoteAddr, w.status)
				}
			}
		}
	}
	for _, mode := range []string{"cold", "warmed", "second", "warming"} {
		b.Run(mode, func(b *testing.B) {
			var m0, m1 runtime.MemStats
			var mallocs, bytes uint64
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				s := New(listingDocs{docs}, benchOptions("metrics"))
				switch mode {
				case "warmed":
					warmAll(b, s)
				case "second":
					boot(s)
				}
				runtime.ReadMemStats(&m0)
				b.StartTimer()
				if mode == "warming" {
					warmAll(b, s)
				} else {
					boot(s)
				}
				b.StopTimer()
				runtime.ReadMemStats(&m1)
				mallocs += m1.Mallocs - m0.Mallocs
				bytes += m1.TotalAlloc - m0.TotalAlloc
				b.StartTimer()
			}
			n := float64(b.N * stormGuests * len(paths))
			b.ReportMetric(float64(mallocs)/n, "allocs/req")
			b.ReportMetric(float64(bytes)/n, "B/req")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/req")
		})
	}
}

// warmAll warms s's cache as Run does when it starts (warmer: the
// instances the store lists), and returns when it is done.
func warmAll(b *testing.B, s *Server) {
	b.Helper()
	recs, err := s.docs.(instanceLister).Instances(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	for _, rec := range recs {
		s.warm(b.Context(), rec.UUID, rec.Addresses)
	}
}
