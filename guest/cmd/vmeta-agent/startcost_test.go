package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/testenv"
)

// Bounds on what the agent's package initialisers allocate, from
// GODEBUG=inittrace=1 (counts, not times: the same on a loaded machine).
// The agent holds boot, and under emulation (TCG) every allocation and
// every instruction before its first log line shows in the unit's start
// time. With jsonschema v5 linked it was 10,600 allocations and 1.2 MB
// (the library compiles its meta-schemas at init); now about 140 and
// 23 KB, the standard library's.
const (
	maxInitAllocs = 500
	maxInitBytes  = 64 << 10
)

// TestStartInitCost builds the agent as "make agent" does and checks
// what its package initialisers allocate (inittrace), printing the
// totals, the largest initialisers and the binary's size.
func TestStartInitCost(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent binary; skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "vmeta-agent")
	build := exec.Command(testenv.GoTool(), "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("vmeta-agent version: %v\n%s", err, stderr.Bytes())
	}
	type initCost struct {
		pkg           string
		bytes, allocs int
	}
	var inits []initCost
	var bytesSum, allocsSum int
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		// init PKG @T ms, C ms clock, B bytes, A allocs
		f := strings.Fields(sc.Text())
		if len(f) != 11 || f[0] != "init" || f[8] != "bytes," || f[10] != "allocs" {
			continue
		}
		b, err1 := strconv.Atoi(f[7])
		a, err2 := strconv.Atoi(f[9])
		if err1 != nil || err2 != nil {
			t.Fatalf("inittrace line %q", sc.Text())
		}
		inits = append(inits, initCost{f[1], b, a})
		bytesSum += b
		allocsSum += a
	}
	if len(inits) < 10 {
		t.Fatalf("only %d inittrace lines: the format changed?\n%s", len(inits), stderr.Bytes())
	}
	sort.Slice(inits, func(i, j int) bool { return inits[i].allocs > inits[j].allocs })
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("vmeta-agent: %d bytes; %d package initialisers: %d bytes, %d allocations", st.Size(), len(inits), bytesSum, allocsSum)
	for _, c := range inits[:5] {
		t.Logf("  %-50s %7d bytes %5d allocs", c.pkg, c.bytes, c.allocs)
	}
	if allocsSum > maxInitAllocs || bytesSum > maxInitBytes {
		t.Errorf("package initialisers allocate %d bytes in %d allocations, more than %d in %d: the largest is %s (%d bytes, %d allocs)",
			bytesSum, allocsSum, maxInitBytes, maxInitAllocs, inits[0].pkg, inits[0].bytes, inits[0].allocs)
	}
}
