//go:build race

package debianvm

// raceEnabled: hostctl is built with -race too when the test runs under
// the race detector.
const raceEnabled = true
