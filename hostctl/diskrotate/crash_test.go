package diskrotate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/internal/crashpoint"
	"github.com/vmeta/vmeta/internal/testenv"
)

// crashed is what a rotation stopped at a step panics with: the
// in-process stand-in for the SIGKILL of a vmetacrash build. The
// procedure's deferred calls still run (they release the instance's
// lock and clear passphrases from memory, which a dead process loses
// anyway); nothing after the step does.
type crashed struct{ at string }

// crashAt makes r stop at the nth time it reaches step.
func crashAt(r *Rotator, step string, nth int) {
	n := 0
	r.step = func(s string) {
		if s != step {
			return
		}
		if n++; n == nth {
			panic(crashed{at: fmt.Sprintf("%s#%d", s, nth)})
		}
	}
}

// runToCrash runs fn and reports whether it stopped at its crash step.
func runToCrash(fn func()) (stopped bool) {
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(crashed); !ok {
				panic(v)
			}
			stopped = true
		}
	}()
	fn()
	return false
}

// TestDiskRotateCrashMatrix is the acceptance core of issue 10 for disk
// passphrases, over the fake LUKS and core (the step logic is what it
// tests; TestDiskRotateCrashQemu keeps one path through real qemu-img
// LUKS disks, libvirt secrets and a SIGKILLed process): each declared
// step, for the first disk and (#2) the second, is a parallel subtest in
// which the rotation of an instance's two encrypted disks to generation
// 2 stops at that step. A fresh rotator (as after a restart) then runs
// the start-up recovery alone: every disk must open with the passphrase
// the key manager holds, its libvirt secret hold that value, and no
// journal be left. Then it rotates to the same generation, which must
// finish without minting another passphrase than one already pending:
// every disk opens with the key manager's passphrase only (one key slot,
// the one recorded), its libvirt secret holds it, nothing is pending and
// its generation is recorded. The table procedure × step → recovered /
// lost is printed; any "lost" fails.
func TestDiskRotateCrashMatrix(t *testing.T) {
	steps := crashpoint.Steps(Proc)
	if len(steps) != 8 {
		t.Fatalf("declared steps %v", steps)
	}
	var mu sync.Mutex
	results := map[string]string{}
	t.Run("step", func(t *testing.T) {
		for _, step := range steps {
			for _, nth := range []int{1, 2} {
				name := step
				if nth == 2 {
					name += "#2"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					result := crashCase(t, step, nth)
					mu.Lock()
					results[name] = result
					mu.Unlock()
					if strings.HasPrefix(result, "lost") {
						t.Error(result)
					}
				})
			}
		}
	})
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-12s %-22s %s\n", "procedure", "step", "result")
	for _, step := range steps {
		for _, name := range []string{step, step + "#2"} {
			fmt.Fprintf(&table, "%-12s %-22s %s\n", Proc, name, results[name])
		}
	}
	t.Logf("disk passphrase rotation crash matrix (fake LUKS and core, real key manager over bolt):%s", table.String())
}

// crashCase runs one row of the crash matrix and returns its result.
func crashCase(t *testing.T, step string, nth int) string {
	ctx := context.Background()
	f := newFakeFixture(t)
	old := map[string][]byte{}
	for _, d := range f.disks {
		old[d], _ = f.km.Passphrase(ctx, f.secret[d])
	}
	r := f.rotator()
	crashAt(r, step, nth)
	var err error
	if !runToCrash(func() { _, err = r.Rotate(ctx, f.subject(), 2, 0, nil) }) {
		return fmt.Sprintf("lost (step never reached: the rotation returned %v)", err)
	}
	// A pending passphrase at the crash is the one generation 2 gets.
	pending := map[string][]byte{}
	for _, d := range f.disks {
		if p, err := f.km.Pending(ctx, f.secret[d]); err == nil {
			pending[d] = p
		}
	}
	r = f.rotator() // the restarted process
	if err := r.Recover(ctx); err != nil {
		return fmt.Sprintf("lost (recovery alone: %v)", err)
	}
	if bad := f.checkRecovered(); len(bad) > 0 {
		return "lost: " + strings.Join(bad, "; ")
	}
	if res, err := r.Rotate(ctx, f.subject(), 2, 0, nil); err != nil || !res.Done {
		return fmt.Sprintf("lost (rotation after the recovery: %+v, %v)", res, err)
	}
	if bad := f.check(2); len(bad) > 0 {
		return "lost: " + strings.Join(bad, "; ")
	}
	for _, d := range f.disks {
		cur, _ := f.km.Passphrase(ctx, f.secret[d])
		if p, ok := pending[d]; ok && !bytes.Equal(cur, p) {
			return fmt.Sprintf("lost: %s: the rotation minted a second passphrase for generation 2", d)
		}
		if bytes.Equal(cur, old[d]) {
			return fmt.Sprintf("lost: %s: the passphrase did not change", d)
		}
		if err := f.luks.Verify(ctx, f.path(d), old[d], nil); err == nil {
			return fmt.Sprintf("lost: %s: the old passphrase still opens it", d)
		}
	}
	if g, err := r.Generation(ctx, f.subject()); err != nil || g != 2 {
		return fmt.Sprintf("lost (generation %d, %v)", g, err)
	}
	return "recovered"
}

// TestDiskRotateCrashQemu is the crash matrix's one path through the
// real parts, on both stores: a child process (testdata/diskrot, built
// with -tags vmetacrash) runs recovery and the rotation of an instance's
// two LUKS disks on real qemu-img images with real libvirt secrets, and
// is killed by SIGKILL as the second disk's new key slot is added (the
// first disk rotated, the second half-way). A second run does the
// start-up recovery alone: every disk must then open with the passphrase
// the key manager holds, read back its pattern, its libvirt secret hold
// that value, and no journal be left. A third run rotates again to the
// same generation, which finishes without minting a new key; then every
// disk must open with the passphrase the key manager holds, read back
// the pattern written before, have one key slot, its libvirt secret that
// value, nothing pending and its generation recorded.
func TestDiskRotateCrashQemu(t *testing.T) {
	testenv.RequireLibvirt(t)
	bin := testenv.BuildCrashBinary(t, "./testdata/diskrot")
	const step = "slot-added"
	if !slices.Contains(crashpoint.Steps(Proc), step) {
		t.Fatalf("no step %s in %v", step, crashpoint.Steps(Proc))
	}
	for _, backend := range []string{"bolt", "redis"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel() // separate stores, instances and secrets
			f := newRotFixture(t, backend)
			run := func(gen int64, crashAt string) (killed bool, out string, err error) {
				cmd := exec.Command(bin, "-store", f.storeURL, "-data", f.dir, "-libvirt", f.uri, "-instance", f.name, "-uuid", f.uuid, "-gen", strconv.FormatInt(gen, 10))
				extra := []string{}
				if crashAt != "" {
					extra = append(extra, crashpoint.EnvVar+"="+crashAt)
				}
				cmd.Env = testenv.ChildEnv([]string{crashpoint.EnvVar}, extra...)
				b, err := cmd.CombinedOutput()
				var ee *exec.ExitError
				if errors.As(err, &ee) && ee.ProcessState.String() == "signal: killed" {
					return true, string(b), nil
				}
				return false, string(b), err
			}
			const gen = 2
			killed, out, err := run(gen, crashpoint.Name(Proc, step)+"#2")
			switch {
			case err != nil:
				t.Fatalf("crash run failed: %v: %s", err, out)
			case !killed:
				t.Fatalf("step never reached: the child was not killed: %s", out)
			}
			if _, out, err := run(0, ""); err != nil {
				t.Fatalf("recovery alone: %v: %s", err, out)
			}
			if bad := f.checkRecovered(); len(bad) > 0 {
				t.Fatal(strings.Join(bad, "; "))
			}
			_, out, err = run(gen, "")
			if err != nil {
				t.Fatalf("recovery run: %v: %s", err, out)
			}
			if !strings.Contains(out, fmt.Sprintf(`{"keyGeneration":%d,`, gen)) || strings.Contains(out, `"pending"`) || strings.Contains(out, `"error"`) {
				t.Fatalf("status after the run: %s", out)
			}
			if bad := f.check(gen, true); len(bad) > 0 {
				t.Fatal(strings.Join(bad, "; "))
			}
		})
	}
}
