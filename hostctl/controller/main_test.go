package controller

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the package's parallel tests 8 per CPU unless -parallel
// says otherwise. Many wait more than they compute: the libvirt tests wait
// for libvirtd and QEMU, the real-path tests for qemu-img's LUKS work; at
// -parallel GOMAXPROCS (go test's default) a two-CPU machine ran the
// fault steps at 38 % of a CPU, and at 4 per CPU the libvirt tests, late
// in file order, got a slot only after the first half of the package —
// their minute of waiting then made the package's tail.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(8*runtime.GOMAXPROCS(0))); err != nil {
			panic(err)
		}
	}
	code := m.Run()
	for _, f := range cleanups {
		f()
	}
	// No goroutine may outlive the tests (a reconciler, a watch, a
	// libvirt connection left running).
	if err := goleak.Find(); code == 0 && err != nil {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		code = 1
	}
	os.Exit(code)
}

// cleanups run after every test: they remove what the test binary's
// caches made (realLUKSImage).
var cleanups []func()
