//go:build vmetacrash

package crashpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Enabled reports whether this binary can crash at a step (built with the
// vmetacrash tag).
const Enabled = true

var (
	hitMu  sync.Mutex
	counts = map[string]int{}
)

// Hit kills the process with SIGKILL when VMETA_CRASH_AT names this step
// (and, with "#N", this is its N-th time).
func Hit(name string) {
	want := os.Getenv(EnvVar)
	if want == "" {
		return
	}
	step, nth := want, 1
	if i := strings.LastIndexByte(want, '#'); i >= 0 {
		n, err := strconv.Atoi(want[i+1:])
		if err == nil && n > 0 {
			step, nth = want[:i], n
		}
	}
	if step != name {
		return
	}
	hitMu.Lock()
	counts[name]++
	c := counts[name]
	hitMu.Unlock()
	if c != nth {
		return
	}
	fmt.Fprintf(os.Stderr, "crashpoint: SIGKILL at %s\n", want)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is delivered; never return into the next step
}
