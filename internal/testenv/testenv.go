// Package testenv gives integration tests across vmeta the real outside
// services they need (a private redis-server today; libvirtd, qemu-img,
// cloud-init and friends as they come), and one policy for when those
// cannot be had.
//
// Skip policy: a test that needs something missing from this machine calls
// Require (directly, or through LookPath or StartRedis), which skips it with
// the reason stated. Under VMETA_REQUIRE_INTEGRATION=1 — set by `make test`
// and CI, which install every service — Require fails the test instead, so
// a missing service can never turn into a silently green run. Something
// that is present but broken (redis-server exists and does not start) is a
// failure either way.
//
// Only _test.go files should import this package.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// RequireEnv is the environment variable that turns skips into failures.
const RequireEnv = "VMETA_REQUIRE_INTEGRATION"

// Required reports whether integration prerequisites are mandatory
// (RequireEnv=1).
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Require stops a test that cannot run because what is unavailable for the
// given reason: it skips, or fails when Required.
func Require(t testing.TB, what, reason string) {
	t.Helper()
	if Required() {
		t.Fatalf("%s is required but unavailable: %s (%s=1, so this is a failure, not a skip)", what, reason, RequireEnv)
		return
	}
	t.Skipf("skipping: %s is unavailable: %s (%s=1 makes this a failure)", what, reason, RequireEnv)
}

// sbinDirs are searched after PATH: a non-root PATH often lacks them, and
// daemons (redis-server, libvirtd) and admin tools live there.
var sbinDirs = []string{"/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin"}

// LookPath returns the path of the executable bin, looked up in PATH and
// then in the sbin directories, or stops the test through Require.
func LookPath(t testing.TB, bin string) string {
	t.Helper()
	if p, err := exec.LookPath(bin); err == nil {
		return p
	}
	for _, dir := range sbinDirs {
		p := filepath.Join(dir, bin)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	Require(t, bin, "not found in PATH or "+strings.Join(sbinDirs, ", "))
	return ""
}
