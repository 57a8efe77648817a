//go:build race

package e2e

// raceEnabled: the test binary runs under the race detector (make test), so
// TestMain builds hostctl with -race too and a data race in the daemon
// makes it exit non-zero, which daemon.Stop reports.
const raceEnabled = true
