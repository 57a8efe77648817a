package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// threadsCPU returns the CPU time the threads of process pid have run so
// far, to the nanosecond: the first field of /proc/<pid>/task/<tid>/schedstat
// (time on a CPU, user and system), summed over the threads. processCPU's
// /proc/<pid>/stat counts in 10 ms ticks, coarse next to a storm's few
// hundred milliseconds. A thread that exits takes its time with it (Go
// servers keep their threads); the storm's figures use the difference of
// two reads.
func threadsCPU(pid int) (time.Duration, error) {
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(files) == 0 {
		return 0, fmt.Errorf("CPU time of pid %d: no /proc/%d/task/*/schedstat", pid, pid)
	}
	var total time.Duration
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			if os.IsNotExist(err) {
				continue // the thread exited meanwhile
			}
			return 0, fmt.Errorf("CPU time of pid %d: %w", pid, err)
		}
		d, err := parseSchedstat(string(b))
		if err != nil {
			return 0, fmt.Errorf("CPU time of pid %d: %s: %w", pid, f, err)
		}
		total += d
	}
	return total, nil
}

// parseSchedstat reads the time on a CPU (nanoseconds, the first field)
// from a schedstat line.
func parseSchedstat(s string) (time.Duration, error) {
	f := strings.Fields(s)
	if len(f) < 1 {
		return 0, fmt.Errorf("unexpected schedstat line %q", s)
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || ns < 0 {
		return 0, fmt.Errorf("unexpected schedstat line %q", s)
	}
	return time.Duration(ns), nil
}

// serverCPU is the CPU time of process pid for the storm and the wrk
// runs: threadsCPU, or processCPU where the kernel has no schedstat.
func serverCPU(pid int) (time.Duration, error) {
	if d, err := threadsCPU(pid); err == nil {
		return d, nil
	}
	return processCPU(pid)
}
