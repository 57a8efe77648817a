package server

import (
	"io"
	"log/slog"
	"runtime"
	rtmetrics "runtime/metrics"
	"testing"
)

func TestGCFloorPercent(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct {
		name        string
		live, floor uint64
		want        int
	}{
		{"live heap above the floor: the default", 100 * mb, 64 * mb, 100},
		{"live heap at the floor", 64 * mb, 64 * mb, 100},
		{"small floor", 16 * mb, 8 * mb, 100},
		{"live 16 MB, floor 64 MB: goal 80 MB", 16 * mb, 64 * mb, 400},
		{"live 8 MB, floor 64 MB: goal 72 MB", 8 * mb, 64 * mb, 800},
		// Under 4 MB the runtime's minimum goal (4 MB × percent / 100)
		// sets the goal: live + floor.
		{"live 1 MB, floor 64 MB: minimum goal 65 MB", 1 * mb, 64 * mb, 1625},
		{"before the first collection: minimum goal = floor", 0, 64 * mb, 1600},
		{"floor under the runtime's minimum", 0, 1 * mb, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := gcFloorPercent(tc.live, tc.floor); got != tc.want {
				t.Errorf("gcFloorPercent(%d, %d) = %d, want %d", tc.live, tc.floor, got, tc.want)
			}
		})
	}
}

func readGC(names ...string) []uint64 {
	s := make([]rtmetrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	rtmetrics.Read(s)
	out := make([]uint64, len(names))
	for i := range s {
		out[i] = s[i].Value.Uint64()
	}
	return out
}

// TestGCFloor: while the floor runs, a collection leaves the heap goal at
// least floor bytes above the live heap; stopped, GC percent is 100
// again.
func TestGCFloor(t *testing.T) {
	if k := gcOperatorSet(); k != "" {
		t.Skipf("%s is set in the environment: the floor stays off by design", k)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const floor = 256 << 20 // well above this test binary's live heap
	seen := make(chan struct{}, 1)
	gcFloor.mu.Lock()
	gcFloor.adjusted = func() {
		select {
		case seen <- struct{}{}:
		default:
		}
	}
	gcFloor.mu.Unlock()
	defer func() {
		gcFloor.mu.Lock()
		gcFloor.adjusted = nil
		gcFloor.mu.Unlock()
	}()
	stop := gcFloorStart(floor, log)
	// A full collection finds the sentinel the floor armed unreachable;
	// its finalizer (the tuner) then sets the percent from the live heap
	// the collection found. The next collection runs with that goal.
	runtime.GC()
	<-seen
	runtime.GC()
	<-seen
	v := readGC("/gc/heap/live:bytes", "/gc/heap/goal:bytes")
	live, goal := v[0], v[1]
	if goal < live+floor*9/10 {
		t.Errorf("with a floor of %d bytes: heap goal %d, live heap %d: want goal ≥ live + floor", floor, goal, live)
	}
	stop()
	if p := readGC("/gc/gogc:percent")[0]; p != 100 {
		t.Errorf("after stop: GC percent %d, want 100", p)
	}
	// Stopped, a collection leaves it so.
	runtime.GC()
	runtime.GC()
	if p := readGC("/gc/gogc:percent")[0]; p != 100 {
		t.Errorf("after stop and two collections: GC percent %d, want 100", p)
	}
}

// TestGCFloorOperatorWins: GOGC or GOMEMLIMIT in the environment turns
// the floor off; a second floor in one process does nothing.
func TestGCFloorOperatorWins(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, k := range []string{"GOGC", "GOMEMLIMIT"} {
		t.Run(k, func(t *testing.T) {
			t.Setenv(k, "off")
			stop := gcFloorStart(256<<20, log)
			defer stop()
			if activeGCFloor() != nil {
				t.Errorf("%s set: a floor started", k)
			}
		})
	}
	t.Run("second floor", func(t *testing.T) {
		if k := gcOperatorSet(); k != "" {
			t.Skipf("%s is set in the environment: the floor stays off by design", k)
		}
		stop := gcFloorStart(256<<20, log)
		defer stop()
		first := activeGCFloor()
		stop2 := gcFloorStart(512<<20, log)
		stop2()
		if activeGCFloor() != first || first == nil {
			t.Errorf("a second floor replaced or stopped the first")
		}
	})
}

func activeGCFloor() *gcFloorTuner {
	gcFloor.mu.Lock()
	defer gcFloor.mu.Unlock()
	return gcFloor.active
}
