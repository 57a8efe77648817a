package devices

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// A cleanup hook that hangs, fails or prints garbage does not stop
// hostctl: Release returns while the hook still runs, every outcome is
// reported in the device's record and on the event stream, and the
// device stays burned (the hook never cleans).
func TestCleanupHookOutcomes(t *testing.T) {
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	for _, tc := range []struct {
		name, cmd, outcome, msg string
		timeout                 time.Duration
	}{
		// Reads the device from stdin and answers; waits on a gate file
		// the test creates only after Release returned.
		{"ok", `cat > ` + dir + `/stdin.json; while [ ! -e ` + gate + ` ]; do sleep 0.01; done; echo '{"message":"wipe scheduled"}'`, HookOK, "wipe scheduled", time.Minute},
		{"fails", `echo "firmware flash failed" >&2; exit 3`, HookFailed, `exit status 3; stderr: "firmware flash failed"`, time.Minute},
		{"garbage", `echo 'this is not json'`, HookGarbage, `stdout is not one JSON object: "this is not json"`, time.Minute},
		{"two objects", `echo '{}{}'`, HookGarbage, "not one JSON object", time.Minute},
		// A hang, with a child that keeps its output open: killed with its
		// process group after the timeout.
		{"hangs", `sleep 600 & sleep 600`, HookTimeout, "killed after 200ms", 200 * time.Millisecond},
		{"no such command", `/nonexistent/cleanup`, HookFailed, "exit status 127", time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(gate)
			hook, err := NewHook(tc.cmd, tc.timeout)
			if err != nil {
				t.Fatal(err)
			}
			b := openBolt(t, t.TempDir())
			inv := newInventory(t, b, "h1", gpuSpec, gpuServer, hook)
			ctx := t.Context()
			if _, _, err := inv.Claim(ctx, Consumer{UUID: "u-1", Name: "vm1"}, []model.PCIAlias{{Name: "gpu", Count: 1}}); err != nil {
				t.Fatal(err)
			}
			rel, err := inv.Release(ctx, "u-1", nil)
			if err != nil || len(rel) != 1 {
				t.Fatalf("Release = %v, %v", rel, err)
			}
			addr := rel[0].Address
			// Release has returned; hostctl keeps working while the hook runs.
			if _, err := inv.List(ctx, Filter{}); err != nil {
				t.Fatal(err)
			}
			if tc.name == "ok" {
				if d := show(t, inv, addr); d.LastCleanupHook != nil {
					t.Fatalf("hook reported before it could end: %+v", d.LastCleanupHook)
				}
				os.WriteFile(gate, nil, 0o644)
			}
			hook.Wait()
			d := show(t, inv, addr)
			if d.LastCleanupHook == nil || d.LastCleanupHook.Outcome != tc.outcome || !strings.Contains(d.LastCleanupHook.Message, tc.msg) {
				t.Fatalf("last_cleanup_hook = %+v, want outcome %s with %q", d.LastCleanupHook, tc.outcome, tc.msg)
			}
			if !d.NeedsCleaning || d.Reserved != 1 {
				t.Fatalf("after the hook the device is %s; it must still need cleaning", counters(d))
			}
			got := streamTypes(t, b)
			if last := got[len(got)-1]; last != EventHook+" "+addr {
				t.Fatalf("events %v: the hook outcome is not the last", got)
			}
			if tc.name == "ok" {
				stdin, err := os.ReadFile(filepath.Join(dir, "stdin.json"))
				if err != nil || !strings.Contains(string(stdin), `"address":"`+addr+`"`) || !strings.Contains(string(stdin), `"needs_cleaning":true`) {
					t.Fatalf("the hook's stdin was %s (%v); want the device record", stdin, err)
				}
			}
		})
	}
}

// More releases than MaxRunningHooks at once: the extra ones are
// reported as skipped, not queued without end.
func TestCleanupHookSkippedWhenBusy(t *testing.T) {
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	hook, err := NewHook(`while [ ! -e `+gate+` ]; do sleep 0.01; done`, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reports []HookResult
	done := make(chan struct{}, 100)
	hook.report = func(_ Device, r HookResult) {
		mu.Lock()
		reports = append(reports, r)
		mu.Unlock()
		done <- struct{}{}
	}
	for i := range MaxRunningHooks + 2 {
		hook.Run(Device{Address: fmt.Sprintf("0000:%02x:00.0", i)})
	}
	// The two extra ones are reported at once, before any hook ends.
	<-done
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(reports) != 2 || reports[0].Outcome != HookSkipped || reports[1].Outcome != HookSkipped {
		t.Fatalf("reports %+v, want two skipped", reports)
	}
	os.WriteFile(gate, nil, 0o644)
	mu.Unlock()
	hook.Wait()
	mu.Lock()
}

// faultStore fails CommitGroup around the real one: before it (nothing
// written) or after it (written, the reply lost: what a connection cut
// during the script looks like to the client).
type faultStore struct {
	Store
	before, after bool
}

var errInjected = errors.New("injected: connection reset")

func (f *faultStore) CommitGroup(ctx context.Context, group string, ops []store.GroupOp) ([]store.Record, error) {
	if f.before {
		return nil, errInjected
	}
	recs, err := f.Store.CommitGroup(ctx, group, ops)
	if err == nil && f.after {
		return nil, errInjected
	}
	return recs, err
}

// The store fails during a claim: the claim happened whole or not at all,
// the error says so, and a retry (the apply run again) or the restart's
// orphan release settles it; a device is never both claimed and free.
func TestClaimStoreFaults(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		newInventory(t, b, "h1", gpuSpec, gpuServer, nil)
		fs := &faultStore{Store: b.st}
		spec, _ := ParseSpec([]byte(gpuSpec))
		inv, err := New(fs, Options{Host: "h1", Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		vm := Consumer{UUID: "u-1", Name: "vm1"}
		req := []model.PCIAlias{{Name: "gpu", Count: 2}}

		fs.before = true
		if _, _, err := inv.Claim(ctx, vm, req); !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "claim devices for vm1") {
			t.Fatalf("Claim with the store failing = %v", err)
		}
		fs.before = false
		if held, _ := inv.Held(ctx, "u-1"); len(held) != 0 {
			t.Fatalf("a failed claim left %+v", held)
		}
		list, _ := inv.List(ctx, Filter{NeedsCleaning: true})
		if len(list) != 0 {
			t.Fatalf("a failed claim burned %+v", list)
		}

		fs.after = true
		if _, _, err := inv.Claim(ctx, vm, req); !errors.Is(err, errInjected) {
			t.Fatalf("Claim with the reply lost = %v", err)
		}
		fs.after = false
		held, _ := inv.Held(ctx, "u-1")
		if len(held) != 2 || held[0].Reserved != 1 || held[1].Reserved != 1 {
			t.Fatalf("claim whose reply was lost: held %+v, want both gpus claimed and burned together", held)
		}
		// The apply is retried: the same devices, nothing new.
		again, claimed, err := inv.Claim(ctx, vm, req)
		if err != nil || len(claimed) != 0 || len(again) != 2 {
			t.Fatalf("retried Claim = %+v, %v, %v", again, claimed, err)
		}
		// Or abandoned: the restart releases them, burned.
		if _, err := inv.ReleaseOrphans(ctx, func(string) bool { return false }); err != nil {
			t.Fatal(err)
		}
		list, _ = inv.List(ctx, Filter{NeedsCleaning: true})
		if len(list) != 2 {
			t.Fatalf("after the orphan release %d need cleaning, want 2", len(list))
		}
	})
}

// Redis itself goes away: the claim fails with the store's error and
// nothing is half-done.
func TestClaimRedisDown(t *testing.T) {
	srv := testenvRedisServer(t)
	b := openRedis(t, srv.URL())
	inv := newInventory(t, b, "h1", gpuSpec, gpuServer, nil)
	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, _, err := inv.Claim(ctx, Consumer{UUID: "u-1", Name: "vm1"}, []model.PCIAlias{{Name: "gpu", Count: 1}})
	if err == nil || !strings.Contains(err.Error(), "claim devices for vm1") {
		t.Fatalf("Claim with Redis down = %v", err)
	}
	t.Logf("claim with Redis down: %v", err)
}

// hostctl stopping kills the hooks still running, and reports each.
func TestCleanupHookStop(t *testing.T) {
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	hook, err := NewHook(`touch `+started+`; sleep 600`, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan HookResult, 1)
	hook.report = func(_ Device, r HookResult) { got <- r }
	hook.Run(Device{Address: "0000:3b:00.0"})
	for {
		if _, err := os.Stat(started); err == nil {
			break
		}
		select {
		case r := <-got:
			t.Fatalf("the hook ended before it started: %+v", r)
		case <-time.After(10 * time.Millisecond):
		}
	}
	hook.Stop(t.Context())
	r := <-got
	if r.Outcome != HookError || !strings.Contains(r.Message, "hostctl is stopping") {
		t.Fatalf("report %+v", r)
	}
	// A release after Stop is reported at once, never run.
	hook.Run(Device{Address: "0000:3c:00.0"})
	if r := <-got; r.Outcome != HookError {
		t.Fatalf("report after stop %+v", r)
	}
}
