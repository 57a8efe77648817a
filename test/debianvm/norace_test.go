//go:build !race

package debianvm

const raceEnabled = false
