package keys_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/vmeta/vmeta/internal/crashpoint"
	"github.com/vmeta/vmeta/internal/keys"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/store/storeurl"
	"github.com/vmeta/vmeta/internal/testenv"
)

// crashStore is a store the crash matrix opens in the test and in the
// child, by URL.
type crashStore struct {
	name string
	// fresh returns the URL of an empty store for one case.
	fresh func(t *testing.T) string
}

func crashStores(t *testing.T) []crashStore {
	redisURL := testenv.StartRedis(t)
	return []crashStore{
		{"bolt", func(t *testing.T) string { return "bolt://" + filepath.Join(t.TempDir(), "vmeta.db") }},
		{"redis", func(t *testing.T) string {
			opt, err := goredis.ParseURL(redisURL)
			if err != nil {
				t.Fatal(err)
			}
			c := goredis.NewClient(opt)
			defer c.Close()
			if err := c.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			return redisURL
		}},
	}
}

// crashSecrets and crashBatch make crashBatches batches of rewrapping.
const (
	crashSecrets = 60
	crashBatch   = 16
	crashBatches = (crashSecrets + crashBatch - 1) / crashBatch
)

// crashCases are the steps to kill the rotation at: every declared step
// of the procedure, the per-batch step at its first, second and last
// batch.
func crashCases(t *testing.T) []string {
	steps := crashpoint.Steps(keys.RotateProcedure)
	if len(steps) == 0 {
		t.Fatal("no declared steps for " + keys.RotateProcedure)
	}
	var out []string
	for _, s := range steps {
		name := crashpoint.Name(keys.RotateProcedure, s)
		if s == keys.StepBatchRewrapped {
			for _, n := range []int{1, 2, crashBatches} {
				out = append(out, fmt.Sprintf("%s#%d", name, n))
			}
			continue
		}
		out = append(out, name)
	}
	return out
}

// TestRotateKEKCrashMatrix kills a KEK rotation (a child process built
// with -tags vmetacrash) at every step, on bolt and on Redis; then the
// key manager must open with what the crash left (a key file whose
// current generation is newer than some secrets), every secret must
// still unwrap, a second run must finish the rotation, and afterwards
// every secret and pending passphrase unwraps to its original value under
// the new generation alone. It prints the matrix: store × step →
// recovered / lost.
func TestRotateKEKCrashMatrix(t *testing.T) {
	bin := testenv.BuildCrashBinary(t, "./testdata/kekrotate")
	type row struct {
		store, step, outcome string
		left                 int
	}
	var table []row
	// Every step once, then a few crashes during the recovery run too.
	var cases [][]string
	for _, step := range crashCases(t) {
		cases = append(cases, []string{step})
	}
	name := func(step string) string { return crashpoint.Name(keys.RotateProcedure, step) }
	cases = append(cases,
		[]string{name(keys.StepGenerationWritten), name(keys.StepBatchRewrapped) + "#2"},
		[]string{name(keys.StepBatchRewrapped) + "#2", name(keys.StepBatchRewrapped) + "#1"},
		[]string{name(keys.StepCheckRewrapped), name(keys.StepRetired)},
	)
	for _, cs := range crashStores(t) {
		for _, steps := range cases {
			outcome, left := "recovered", -1
			step := strings.Join(steps, " then ")
			// No "#" in the test name: it goes into t.TempDir, and a
			// bolt URL takes no fragment.
			ok := t.Run(cs.name+"/"+strings.NewReplacer("#", "-", " ", "_").Replace(step), func(t *testing.T) {
				if problems := crashCase(t, bin, cs, steps, &left); len(problems) > 0 {
					outcome = "LOST"
					for _, p := range problems {
						t.Error(p)
					}
				}
			})
			if !ok && outcome == "recovered" {
				outcome = "failed"
			}
			table = append(table, row{cs.name, step, outcome, left})
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-6s  %-64s  %-21s  %s\n", "store", "procedure/step (killed at)", "at gen 1 after kill 1", "outcome")
	for _, r := range table {
		fmt.Fprintf(&b, "%-6s  %-64s  %10d/%-10d  %s\n", r.store, r.step, r.left, crashSecrets, r.outcome)
	}
	t.Log(b.String())
	for _, r := range table {
		if r.outcome != "recovered" {
			t.Errorf("%s %s: %s", r.store, r.step, r.outcome)
		}
	}
}

// crashCase runs one cell of the matrix and returns what was lost.
// left is set to how many secrets the crash left under generation 1.
// The rotation is killed at steps[0], then (restarted) at each further
// step in turn, then run to the end.
func crashCase(t *testing.T, bin string, cs crashStore, steps []string, left *int) []string {
	ctx := context.Background()
	url := cs.fresh(t)
	dir := t.TempDir()
	open := func() (store.Store, *keys.Manager) {
		t.Helper()
		st, err := storeurl.Open(ctx, url, storeurl.WithDataDir(dir))
		if err != nil {
			t.Fatal(err)
		}
		m, err := keys.Open(ctx, st, dir, keys.Options{Host: "crash"})
		if err != nil {
			st.Close()
			t.Fatalf("open the key manager: %v", err)
		}
		return st, m
	}
	st, m := open()
	s := seed(t, m, crashSecrets)
	st.Close()

	run := func(crashAt string) (string, error) {
		cmd := exec.Command(bin, "-store", url, "-data", dir, "-host", "crash", "-gen", "2", "-batch", fmt.Sprint(crashBatch))
		cmd.Env = testenv.ChildEnv([]string{crashpoint.EnvVar}, crashpoint.EnvVar+"="+crashAt)
		if crashAt == "" {
			cmd.Env = testenv.ChildEnv([]string{crashpoint.EnvVar})
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(steps[0])
	wantKilled(t, steps[0], out, err)

	// Restart after the crash: the key manager opens (the key file's
	// current generation is already 2, written before any rewrap), and
	// every secret reads.
	st, m = open()
	var lost []string
	if k := m.KEK(); k.Current != 2 {
		lost = append(lost, fmt.Sprintf("after the crash: key file at generation %d; want 2 (written before any rewrap)", k.Current))
	}
	old := 0
	for id, want := range s.pass {
		if got, err := m.Passphrase(ctx, id); err != nil || string(got) != string(want) {
			lost = append(lost, fmt.Sprintf("after the crash, before recovery: secret %s: %v", id, err))
		}
		if g, _, _ := m.WrappedGenerationsForTest(ctx, id); g == 1 {
			old++
		}
	}
	*left = old
	st.Close()
	for _, step := range steps[1:] {
		out, err := run(step)
		wantKilled(t, step+" (restarted)", out, err)
	}

	// Finish the rotation.
	if out, err := run(""); err != nil {
		lost = append(lost, fmt.Sprintf("the rotation after the crash failed: %v\n%s", err, out))
	}
	st, m = open()
	defer st.Close()
	lost = append(lost, s.verify(ctx, m, 2)...)
	return lost
}

// wantKilled fails the test unless the child died by SIGKILL (it reached
// the crash point).
func wantKilled(t *testing.T, step, out string, err error) {
	t.Helper()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the rotation did not die at %s: %v\n%s", step, err, out)
	}
}
