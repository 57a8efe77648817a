package layout

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/testenv"
)

// TestMakeTestRequiresIntegration runs `make test`'s own recipe with a
// stand-in for go that records the environment it is given (setup and
// package are taken as done: make -o), and checks that every go test it
// runs has VMETA_REQUIRE_INTEGRATION=1 — so that a plain `make test`,
// not only CI's, cannot pass by skipping the integration tests, as
// internal/testenv promises. The variable is cleared first: the recipe,
// not the caller, must set it.
func TestMakeTestRequiresIntegration(t *testing.T) {
	mk := testenv.LookPath(t, "make")
	root := moduleRoot(t)
	dir := t.TempDir()
	record := filepath.Join(dir, "calls")
	fakeGo := filepath.Join(dir, "go")
	script := "#!/bin/sh\nprintf '%s %s\\n' \"${" + testenv.RequireEnv + ":-unset}\" \"$*\" >>" + record + "\n"
	if err := os.WriteFile(fakeGo, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(mk, "--no-print-directory", "-C", root, "-o", "setup", "-o", "package", "test", "GO="+fakeGo)
	// Not the caller's make flags (this may run under make test itself).
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" && k != testenv.RequireEnv {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make test with a stand-in go: %v\n%s", err, out)
	}
	data, err := os.ReadFile(record)
	if err != nil {
		t.Fatalf("the recipe ran no go command: %v", err)
	}
	tests := 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		env, args, _ := strings.Cut(line, " ")
		// gotestsum runs go test itself: `go run gotestsum … --raw-command
		// -- <go> test -json …` (the stand-in does not run it; the
		// environment it records is the one gotestsum would pass on).
		if strings.HasPrefix(args, "run gotest.tools/gotestsum") {
			if _, raw, ok := strings.Cut(args, " --raw-command -- "); ok {
				_, args, _ = strings.Cut(raw, " ")
			}
		}
		if !strings.HasPrefix(args, "test ") {
			continue
		}
		tests++
		if env != "1" {
			t.Errorf("make test runs go %s with %s=%s, want 1", args, testenv.RequireEnv, env)
		}
	}
	if tests == 0 {
		t.Errorf("make test ran no go test:\n%s", data)
	}
}
