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
