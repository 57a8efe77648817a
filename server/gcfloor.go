package server

import (
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"
	"sync/atomic"
)

// DefaultGCHeapFloor is the default of Options.GCHeapFloor in the
// commands (Config): 64 MiB.
//
// Why: net/http allocates per request (its request, header map,
// response writer, buffers: ~1 kB) in the bare server and in this one
// alike, so both collect garbage at the same rate in bytes; what a
// collection costs is marking the live heap. With the runtime's default
// (GOGC=100, a heap goal of twice the live heap) a process whose live
// heap is L collects every L bytes allocated and marks L each time: GC
// CPU per request grows as the live heap does, not at all with it. The
// bare server's live heap is under a megabyte and it collects every 4 MB
// (the runtime's minimum goal), 2 % of its CPU; hostctl's live heap
// (its own state, libvirt, the schemas, the cached views) made it 6 %
// and the replica's 4.7 % (test/bench/metadata, /openstack/latest/
// meta_data.json, issue 23 item 3). A floor of 64 MiB between the live
// heap and the next collection brings that back to the bare server's
// share for live heaps up to ~16 MB, at the cost of up to 64 MiB more
// heap (docs/operators.md has the figures).
const DefaultGCHeapFloor = 64 << 20

// gcFloor is the process's one GC pacing floor (gcFloorStart): a
// process has one garbage collector, so two servers in one process (the
// tests) share the first one's.
var gcFloor struct {
	mu     sync.Mutex
	active *gcFloorTuner
	// adjusted, if set (tests), is called under mu after each collection
	// the active floor saw.
	adjusted func()
}

// gcFloorTuner keeps the heap goal at least floor bytes above the live
// heap: after every collection (a finalizer on a sentinel object, re-armed
// each cycle) it sets the GC percent to max(100, 100 × floor / live).
// The goal thus grows with the live heap (as GOGC=100's does) and never
// comes closer to it than floor, which a fixed GOGC cannot do (too low
// for a small heap, too high for a large one) and a minimum heap
// (GOMEMLIMIT with GOGC=off) does only until the live heap reaches it.
type gcFloorTuner struct {
	floor   uint64
	stopped atomic.Bool
	percent int // last set; only the finalizer goroutine and start/stop touch it, under gcFloor.mu
	sample  []rtmetrics.Sample
}

// gcSentinel is the object whose finalizer runs once per collection: big
// enough not to share a tiny-allocator block (whose finalizers may never
// run).
type gcSentinel struct {
	_ [32]byte
	_ *int
}

// gcOperatorSet names the environment variable an operator tuned the
// collector with, if any: then the floor stays off (theirs wins).
func gcOperatorSet() string {
	for _, k := range []string{"GOGC", "GOMEMLIMIT"} {
		if _, ok := os.LookupEnv(k); ok {
			return k
		}
	}
	return ""
}

// gcFloorStart starts the process's GC pacing floor of floor bytes and
// returns what stops it (restoring GC percent 100). It does nothing (and
// returns a no-op) when floor <= 0, when GOGC or GOMEMLIMIT is set in the
// environment (the operator's setting wins), or when a floor is already
// running in this process.
func gcFloorStart(floor int64, log *slog.Logger) (stop func()) {
	if floor <= 0 {
		return func() {}
	}
	if k := gcOperatorSet(); k != "" {
		log.Info("metadata GC heap floor off: the collector is tuned by the environment", "variable", k)
		return func() {}
	}
	gcFloor.mu.Lock()
	defer gcFloor.mu.Unlock()
	if gcFloor.active != nil {
		return func() {}
	}
	t := &gcFloorTuner{
		floor: uint64(floor), percent: 100,
		sample: []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}},
	}
	gcFloor.active = t
	t.adjustLocked()
	t.arm()
	log.Info("metadata GC heap floor", "bytes", floor)
	return func() {
		gcFloor.mu.Lock()
		defer gcFloor.mu.Unlock()
		if gcFloor.active != t {
			return
		}
		t.stopped.Store(true)
		gcFloor.active = nil
		if t.percent != 100 {
			debug.SetGCPercent(100)
		}
	}
}

func (t *gcFloorTuner) arm() {
	runtime.SetFinalizer(&gcSentinel{}, t.collected)
}

// collected runs (on the finalizer goroutine) after each collection.
func (t *gcFloorTuner) collected(*gcSentinel) {
	if t.stopped.Load() {
		return
	}
	gcFloor.mu.Lock()
	if gcFloor.active == t {
		t.adjustLocked()
		if gcFloor.adjusted != nil {
			gcFloor.adjusted()
		}
	}
	gcFloor.mu.Unlock()
	t.arm()
}

// adjustLocked sets the GC percent for the live heap the last collection
// found.
func (t *gcFloorTuner) adjustLocked() {
	rtmetrics.Read(t.sample)
	if t.sample[0].Value.Kind() != rtmetrics.KindUint64 {
		return
	}
	p := gcFloorPercent(t.sample[0].Value.Uint64(), t.floor)
	if p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
}

// gcFloorPercent is the GC percent that puts the heap goal at about
// max(2 × live, live + floor): 100, or more when 100 % of the live heap
// is less than floor. The runtime's minimum heap goal (4 MB at GOGC=100)
// grows with the percent, so for a live heap under 4 MB the percent is
// the one whose minimum goal is live + floor; before the first
// collection (live 0) that is floor.
func gcFloorPercent(live, floor uint64) int {
	const minGoal = 4 << 20 // the runtime's minimum heap goal at GOGC=100
	if live >= floor {
		return 100
	}
	p := (live + floor) * 100 / minGoal
	if live > 0 {
		p = min(p, (floor*100+live-1)/live)
	}
	return int(max(p, 100))
}
