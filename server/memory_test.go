package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"testing"

	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
)

// memInstances is how many instances the memory benchmark caches.
const memInstances = 1000

// memInstance is the i-th variant of the rich instance: its own UUID,
// name, source address, MACs and NIC address (and, rendered with
// crypto/rand, its own random_seed), as distinct instances are.
func memInstance(t testing.TB, i int) (*model.Instance, string) {
	in := richInstance(t)
	hi, lo := byte(i>>8), byte(i)
	in.UUID = fmt.Sprintf("00000000-0000-4000-8000-%012x", i+1)
	in.Name = fmt.Sprintf("web-%05d", i)
	in.Hostname = in.Name
	addr := fmt.Sprintf("10.1.%d.%d", hi, lo)
	in.Addresses = []string{addr}
	in.NICs[0].MAC = fmt.Sprintf("52:54:00:01:%02x:%02x", hi, lo)
	in.NICs[0].IPs[0].Address = addr + "/8"
	in.NICs[1].MAC = fmt.Sprintf("52:54:00:02:%02x:%02x", hi, lo)
	in.Normalize()
	if err := in.Validate(); err != nil {
		t.Fatalf("memInstance: %v", err)
	}
	return in, addr + ":40000"
}

// memPaths are what the memory benchmark reads from every instance:
// "meta_data" what test/bench/metadata reads (one file); "cloud-init" what
// cloud-init's OpenStack and EC2 readers fetch; "all" every path served.
var memPaths = map[string][]string{
	"meta_data": {"/openstack/latest/meta_data.json"},
	"cloud-init": {
		"/openstack", "/openstack/2018-08-27/meta_data.json", "/openstack/2018-08-27/user_data",
		"/openstack/2018-08-27/vendor_data.json", "/openstack/2018-08-27/vendor_data2.json",
		"/openstack/2018-08-27/network_data.json",
		"/2009-04-04/meta-data/", "/2009-04-04/meta-data/hostname", "/2009-04-04/meta-data/instance-id",
		"/2009-04-04/meta-data/public-keys/0/openssh-key", "/2009-04-04/user-data",
	},
	"all": nil, // filled from the view's paths
}

// BenchmarkViewMemory measures what the cache keeps per instance: the
// live heap (after a GC) grown by reading memInstances distinct instances
// of the rich example, each from its own source address, reported as
// B/view. The documents are published (and their trees encoded) before
// the measurement starts.
func BenchmarkViewMemory(b *testing.B) {
	docs := newFakeDocs()
	addrs := make([]string, memInstances)
	for i := range addrs {
		in, addr := memInstance(b, i)
		tr, err := metadata.Render(in, metadata.Options{})
		if err != nil {
			b.Fatal(err)
		}
		docs.publishTree(b, in, tr)
		addrs[i] = addr
	}
	for _, name := range []string{"meta_data", "cloud-init", "all"} {
		b.Run(name, func(b *testing.B) {
			paths := memPaths[name]
			if paths == nil {
				s := New(docs, benchOptions("bare"))
				serveOnce(b, s, "/openstack/latest/meta_data.json", addrs[0])
				for _, p := range s.cache.byAddr(mustAddr(addrs[0])).paths() {
					paths = append(paths, "/"+p)
				}
			}
			var total float64
			n := 0
			for b.Loop() {
				total += viewMemory(b, docs, addrs, paths)
				n++
			}
			b.ReportMetric(total/float64(n), "B/view")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// viewMemory returns the live heap per instance a fresh server grows by
// serving paths to every address.
func viewMemory(b *testing.B, docs *fakeDocs, addrs, paths []string) float64 {
	s := New(docs, benchOptions("bare"))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, a := range addrs {
		for _, p := range paths {
			serveOnce(b, s, p, a)
		}
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := s.cache.size(); got != len(addrs) {
		b.Fatalf("%d views cached, want %d", got, len(addrs))
	}
	runtime.KeepAlive(s)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(len(addrs))
}

func mustAddr(hostport string) netip.Addr { return netip.MustParseAddrPort(hostport).Addr() }

func serveOnce(b testing.TB, s *Server, target, remote string) {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.RemoteAddr = remote
	w := &discard{h: http.Header{}}
	s.ServeHTTP(w, r)
	if w.status != 0 && w.status != http.StatusOK {
		b.Fatalf("GET %s from %s: status %d", target, remote, w.status)
	}
}
