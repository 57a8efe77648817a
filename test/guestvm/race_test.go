//go:build race

package guestvm

// raceEnabled: the test binary runs under the race detector, so hostctl
// is built with -race too and a data race in the daemon makes it exit
// non-zero, which hostd.stop reports.
const raceEnabled = true
