//go:build linux

package guest

import (
	"bytes"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// ProcessAge returns how long ago the kernel started this process, from
// the start time in /proc/self/stat (in clock ticks since boot, 100 a
// second on Linux) and CLOCK_BOOTTIME. The kernel counts from the fork:
// what the parent's child did before the exec (systemd sets up the
// service's credentials, cgroup and log stream there), the exec, the
// binary's page-in and the Go runtime's start, none of which a timer
// started in main sees. ok is false when it cannot tell.
func ProcessAge() (age time.Duration, ok bool) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, false
	}
	// pid (comm) state ...: comm may hold spaces and parentheses; the
	// fields start after the last ')'. starttime is field 22, the 20th
	// after comm.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 {
		return 0, false
	}
	ticks, err := strconv.ParseInt(string(f[19]), 10, 64)
	if err != nil {
		return 0, false
	}
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &now); err != nil {
		return 0, false
	}
	const hz = 100 // USER_HZ: what /proc reports in, whatever the kernel's HZ
	start := time.Duration(ticks) * (time.Second / hz)
	age = time.Duration(now.Nano()) - start
	if age < 0 {
		return 0, false
	}
	return age, true
}
