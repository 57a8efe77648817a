package crashpoint

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync/atomic"
	"testing"
)

// runs makes TestDeclare's procedure name unique per run (-count=N):
// declarations are process-wide.
var runs atomic.Int64

func TestDeclare(t *testing.T) {
	proc := fmt.Sprintf("test-proc-%d", runs.Add(1))
	Declare(proc, "a", "b")
	Declare(proc, "c")
	if got := Steps(proc); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("Steps = %v", got)
	}
	if !slices.Contains(Procedures(), proc) {
		t.Fatalf("Procedures = %v", Procedures())
	}
	if Name("p", "s") != "p/s" {
		t.Fatal(Name("p", "s"))
	}
}

// TestHit runs this test binary again with VMETA_CRASH_AT set: without the
// vmetacrash tag the child passes every step; with it, the child dies by
// SIGKILL at the named step and its N-th occurrence.
func TestHit(t *testing.T) {
	if os.Getenv("CRASHPOINT_CHILD") == "1" {
		for range 3 {
			Hit("p/loop")
		}
		Hit("p/end")
		os.Stdout.WriteString("finished\n")
		return
	}
	for _, at := range []string{"p/end", "p/loop#2", "p/loop#4", "other"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHit$")
		cmd.Env = append(os.Environ(), "CRASHPOINT_CHILD=1", EnvVar+"="+at)
		out, err := cmd.CombinedOutput()
		killed := false
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ProcessState.String() == "signal: killed" {
			killed = true
		}
		wantKilled := Enabled && (at == "p/end" || at == "p/loop#2")
		if killed != wantKilled {
			t.Errorf("VMETA_CRASH_AT=%s: killed=%v, want %v (err %v, output %s)", at, killed, wantKilled, err, out)
		}
		if !killed && err != nil {
			t.Errorf("VMETA_CRASH_AT=%s: %v: %s", at, err, out)
		}
	}
}
