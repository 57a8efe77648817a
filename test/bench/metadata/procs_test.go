package main

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// TestParseStatCPU: utime + stime (fields 14 and 15) in USER_HZ ticks,
// counted after the command name, which may hold spaces and parentheses.
func TestParseStatCPU(t *testing.T) {
	const stat = "4242 (vmeta (x) y) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 9 0 12345 0 0\n"
	got, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3250 * time.Millisecond; got != want {
		t.Errorf("parseStatCPU = %s, want %s", got, want)
	}
	for _, bad := range []string{"", "4242 vmeta S 1", "4242 (vmeta) S 1 2 3", "4242 (vmeta) S 1 4242 4242 0 -1 0 0 0 0 0 x 75 0"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q): no error", bad)
		}
	}
}

// TestProcessCPU: the benchmark's own process has spent CPU time, and
// the figure does not go back.
func TestProcessCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/<pid>/stat")
	}
	first, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := range 50_000_000 { // some CPU time
		x += i & 3
	}
	second, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if second < first || x < 0 {
		t.Errorf("CPU time went from %s to %s", first, second)
	}
}

// TestParseSchedstat: the time on a CPU is the first field, in
// nanoseconds.
func TestParseSchedstat(t *testing.T) {
	got, err := parseSchedstat("168946750 1244680578 595\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := 168946750 * time.Nanosecond; got != want {
		t.Errorf("parseSchedstat = %s, want %s", got, want)
	}
	for _, bad := range []string{"", "\n", "x 1 2", "-5 1 2"} {
		if _, err := parseSchedstat(bad); err == nil {
			t.Errorf("parseSchedstat(%q): no error", bad)
		}
	}
}

// TestThreadsCPU: the benchmark's own threads have run, to the
// nanosecond, and the figure does not go back.
func TestThreadsCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("reads /proc/<pid>/task/*/schedstat, which this system lacks")
	}
	first, err := threadsCPU(os.Getpid())
	if err != nil {
		t.Skipf("no schedstat: %v", err)
	}
	x := 0
	for i := range 50_000_000 {
		x += i & 3
	}
	second, err := threadsCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if second <= first || x < 0 {
		t.Errorf("CPU time went from %s to %s", first, second)
	}
}

// TestParseHeapCounters: the storm's allocations and bytes come from the
// two counters of a Prometheus exposition (hostctl's, or the bare
// server's two lines); either missing is an error.
func TestParseHeapCounters(t *testing.T) {
	body := "# HELP go_memstats_mallocs_total x\ngo_memstats_mallocs_total 1.2345e+06\ngo_memstats_alloc_bytes 99\ngo_memstats_alloc_bytes_total 7.5e+07\n"
	objs, bytes, err := parseHeapCounters(body)
	if err != nil || objs != 1234500 || bytes != 75000000 {
		t.Errorf("parseHeapCounters = %d, %d, %v; want 1234500, 75000000", objs, bytes, err)
	}
	for _, bad := range []string{"", "go_memstats_mallocs_total 5\n", "go_memstats_alloc_bytes_total 5\n", "go_memstats_mallocs_total x\ngo_memstats_alloc_bytes_total 5\n"} {
		if _, _, err := parseHeapCounters(bad); err == nil {
			t.Errorf("parseHeapCounters(%q): no error", bad)
		}
	}
}
