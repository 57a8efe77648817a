package server

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// bootPaths are what cloud-init's OpenStack and EC2 readers fetch at boot
// (memPaths' "cloud-init"), in order.
var bootPaths = memPaths["cloud-init"]

// BenchmarkBootFirstRequest (issue 23 item 3): the boot requests of a
// guest whose instance the server has not seen since it started (cold:
// every view is dropped before each boot), against the same requests
// answered from the cache (second). The difference is what a cold boot
// storm costs beyond a warm one, per guest; allocs/op and B/op show it
// without the noise of a loaded machine. "warmed" boots after the server
// warmed the view (warm.go, not counted): it should cost what "second"
// does.
func BenchmarkBootFirstRequest(b *testing.B) {
	for _, mode := range []string{"first", "warmed", "second"} {
		b.Run(mode, func(b *testing.B) {
			docs := newFakeDocs()
			docs.publish(b, richInstance(b))
			s := New(docs, benchOptions("bare"))
			reqs := make([]*http.Request, len(bootPaths))
			for i, p := range bootPaths {
				reqs[i] = httptest.NewRequest(http.MethodGet, p, nil)
				reqs[i].RemoteAddr = richAddr
			}
			w := &discard{h: http.Header{}}
			boot := func() {
				for _, r := range reqs {
					clear(w.h)
					w.status = 0
					s.ServeHTTP(w, r)
					if w.status != 0 && w.status != 200 {
						b.Fatalf("%s: status %d", r.URL.Path, w.status)
					}
				}
			}
			boot()
			b.ReportAllocs()
			for b.Loop() {
				switch mode {
				case "first":
					s.Invalidate(richUUID)
				case "warmed":
					// As hostctl warms a published instance
					// (warm.go), not counted.
					b.StopTimer()
					s.Invalidate(richUUID)
					s.warm(b.Context(), richUUID, []string{"10.0.0.5", "127.0.0.1", "::1"})
					b.StartTimer()
				}
				boot()
			}
		})
	}
}
