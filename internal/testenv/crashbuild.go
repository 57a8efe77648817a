package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildCrashBinary builds the main package pkg (a module path such as
// "github.com/vmeta/vmeta/hostctl/cmd/hostctl", or one under the test's
// own package, "./testdata/…") with the vmetacrash build tag, so that
// internal/crashpoint kills it at the step VMETA_CRASH_AT names, and
// returns the binary's path (in t.TempDir). The race detector is on when
// the test has it.
func BuildCrashBinary(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	args := []string{"build", "-tags", "vmetacrash", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(GoTool(), append(args, pkg)...)
	cmd.Env = os.Environ()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s with -tags vmetacrash: %v\n%s", pkg, err, out)
	}
	return bin
}

// GoTool is the go command: "go" on PATH (the one running the tests).
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}
