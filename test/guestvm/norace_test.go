//go:build !race

package guestvm

const raceEnabled = false
