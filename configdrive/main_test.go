package configdrive

import (
	"flag"
	"os"
	"testing"
)

// TestMain bounds how much the fuzzing engine minimizes each new input,
// unless -test.fuzzminimizetime is given. With Go's default (up to 60 s per
// input) a worker that finds new coverage in a drive image (tens of KB; each
// run writes and reads a file) spends the next minute minimizing it and
// reports no runs: "go test -fuzz FuzzRead -fuzztime 25s" showed 0 execs/s
// for 22 s. Minimizing a disk image byte by byte finds little anyway.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.fuzzminimizetime" })
	if !given {
		if err := flag.Set("test.fuzzminimizetime", "1000x"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
