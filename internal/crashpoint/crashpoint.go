// Package crashpoint lets tests kill a process at a named step of a
// multi-step procedure, to prove that the procedure recovers from a crash
// at every step (key rotation, disk passphrase rotation).
//
// A procedure marks its steps:
//
//	crashpoint.Hit("disk-rotate/slot-added")
//
// In a production build Hit does nothing: the hook exists only in binaries
// built with the build tag vmetacrash (`go build -tags vmetacrash`), and
// even there only when the environment variable VMETA_CRASH_AT names the
// step. Then Hit sends SIGKILL to its own process — no deferred function,
// no undo step and no buffered write runs, as in a power cut of the
// process. VMETA_CRASH_AT may name a step with a count ("step#2": the
// second time the step is reached), so a loop's later iterations can be
// hit too.
//
// Tests list the steps a procedure has with Steps (every Hit registers its
// name through Declare at package init, so the matrix of steps is taken
// from the code, not written twice).
package crashpoint

import (
	"slices"
	"sync"
)

// EnvVar names the step to crash at (only in vmetacrash builds).
const EnvVar = "VMETA_CRASH_AT"

var (
	mu       sync.Mutex
	declared = map[string][]string{}
)

// Declare registers the steps of a procedure, in order (for Steps). Call
// it from a package-level var or init function of the package that has
// the procedure.
func Declare(procedure string, steps ...string) []string {
	mu.Lock()
	defer mu.Unlock()
	declared[procedure] = append(declared[procedure], steps...)
	return steps
}

// Steps returns the declared steps of a procedure, in order.
func Steps(procedure string) []string {
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(declared[procedure])
}

// Procedures returns the names of every procedure with declared steps,
// sorted.
func Procedures() []string {
	mu.Lock()
	defer mu.Unlock()
	var names []string
	for p := range declared {
		names = append(names, p)
	}
	slices.Sort(names)
	return names
}

// Name joins a procedure and a step into the name Hit and VMETA_CRASH_AT
// use ("procedure/step").
func Name(procedure, step string) string { return procedure + "/" + step }
