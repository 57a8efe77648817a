package metadata_test

import (
	"flag"
	"os"
	"testing"
)

// TestMain bounds how much the fuzzing engine minimizes each new input,
// unless -test.fuzzminimizetime is given. With Go's default (up to 60 s per
// input) a worker that finds new coverage in a stored tree of a few KB
// spends the next minute minimizing it (the byte-pair phase alone is
// quadratic in the input's length) and reports no runs: "go test -fuzz
// FuzzDecodeTree -fuzztime 25s" stalled at 0 execs/s after 6,984.
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
