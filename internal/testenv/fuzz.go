package testenv

import (
	"flag"
	"os"
	"testing"
)

// DefaultFuzzMinimize is the -test.fuzzminimizetime FuzzMain sets: a count
// of runs, not Go's default of up to 60 s per input.
const DefaultFuzzMinimize = "1000x"

// FuzzMain is a TestMain for packages whose fuzz targets take inputs of
// kilobytes (drive images, stored trees): it bounds how much the fuzzing
// engine minimizes each new input, unless -test.fuzzminimizetime is
// given. With Go's default a worker that finds new coverage spends up to a
// minute minimizing it (the byte-pair phase is quadratic in the input's
// length) and reports no runs meanwhile: "go test -fuzz FuzzRead -fuzztime
// 25s" showed 0 execs/s for 22 s, FuzzDecodeTree stalled after 6,984.
func FuzzMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.fuzzminimizetime" })
	if !given {
		if err := flag.Set("test.fuzzminimizetime", DefaultFuzzMinimize); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
