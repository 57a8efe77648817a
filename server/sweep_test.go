package server

import (
	"path/filepath"
	"testing"

	"github.com/vmeta/vmeta/internal/store/bolt"
)

// sweepViews is how many cached views BenchmarkSweep compares.
const sweepViews = 1000

// BenchmarkSweep (issue 23 item 3): one convergence sweep of
// sweepViews cached views over the embedded store, per view. Run sweeps
// every DefaultSweepInterval while guests boot: what a sweep costs lands
// in a boot storm's CPU time whenever one falls in it.
func BenchmarkSweep(b *testing.B) {
	st, err := bolt.Open(filepath.Join(b.TempDir(), "vmeta.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	for i := range sweepViews {
		in, _ := memInstance(b, i)
		putInstanceTB(b, st, in)
	}
	s := New(st, benchOptions("metrics"))
	recs, err := st.Instances(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	for _, rec := range recs {
		s.warm(b.Context(), rec.UUID, rec.Addresses)
	}
	if n := s.cache.size(); n != sweepViews {
		b.Fatalf("%d views cached, want %d", n, sweepViews)
	}
	b.ReportAllocs()
	for b.Loop() {
		s.sweep(b.Context())
	}
	if n := s.cache.size(); n != sweepViews {
		b.Fatalf("%d views cached after the sweeps, want %d (nothing changed)", n, sweepViews)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*sweepViews), "ns/view")
}
