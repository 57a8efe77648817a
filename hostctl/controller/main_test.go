package controller

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// TestMain runs the package's parallel tests 4 per CPU unless -parallel
// says otherwise. They wait more than they compute: a fault step opens a
// bolt file (fsyncs), runs qemu-img and the fake qemu-img script as
// processes, and the libvirt tests wait for libvirtd and QEMU; at
// -parallel GOMAXPROCS (go test's default) a two-CPU machine ran the
// fault steps at 38 % of a CPU (a CPU profile of TestFaultsDelete,
// TestFaultsApply* and TestFaultsFirmware).
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(4*runtime.GOMAXPROCS(0))); err != nil {
			panic(err)
		}
	}
	code := m.Run()
	for _, f := range cleanups {
		f()
	}
	os.Exit(code)
}

// cleanups run after every test: they remove what the test binary's
// caches made (realLUKSImage).
var cleanups []func()
