package devices

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/testenv"
)

const (
	poolSize = 20
	claims   = 200
)

const poolSpec = `[{"vendor_id":"10de","product_id":"20b5","alias":"gpu","one_time_use":true}]`

// claimResult is one claimer's outcome.
type claimResult struct {
	Consumer string `json:"consumer"`
	Address  string `json:"address,omitempty"`
	Err      string `json:"err,omitempty"`
}

// claimRun is what one process's claimers did.
type claimRun struct {
	Results   []claimResult `json:"results"`
	Conflicts int64         `json:"conflicts"`
}

// claimMany runs n concurrent claims of one gpu, consumers prefix-0..n-1.
func claimMany(inv *Inventory, prefix string, n int) []claimResult {
	out := make([]claimResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := Consumer{UUID: fmt.Sprintf("%s-%03d", prefix, i), Name: fmt.Sprintf("%s-vm%03d", prefix, i)}
			out[i].Consumer = c.UUID
			held, _, err := inv.Claim(context.Background(), c, []model.PCIAlias{{Name: "gpu", Count: 1}})
			if err != nil {
				out[i].Err = err.Error()
				return
			}
			out[i].Address = held[0].Address
		}()
	}
	wg.Wait()
	return out
}

// checkClaims checks the claimers' outcomes against the store: every
// device claimed at most once, every claimed one burned, every loser told
// "no device available"; then releases them all and checks that every
// claimed device ends burned and needing cleaning. It prints the counts.
func checkClaims(t *testing.T, inv *Inventory, results []claimResult, conflicts int64) {
	t.Helper()
	ctx := t.Context()
	byAddr := map[string][]string{}
	won, unavailable := 0, 0
	for _, r := range results {
		switch {
		case r.Err == "":
			won++
			byAddr[r.Address] = append(byAddr[r.Address], r.Consumer)
		case strings.Contains(r.Err, "no device available"):
			unavailable++
		default:
			t.Errorf("claimer %s: unexpected error %s", r.Consumer, r.Err)
		}
	}
	for addr, who := range byAddr {
		if len(who) > 1 {
			t.Errorf("device %s claimed by %d consumers: %v", addr, len(who), who)
		}
	}
	list, err := inv.List(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	burned, inUse := 0, 0
	for _, d := range list {
		if d.Used == 1 {
			inUse++
			if got := byAddr[d.Address]; len(got) != 1 || got[0] != d.Consumer {
				t.Errorf("store says %s is held by %s; the claimers say %v", d.Address, d.Consumer, got)
			}
		}
		if d.Reserved == d.Total {
			burned++
		}
	}
	var consumers []string
	for _, r := range results {
		if r.Err == "" {
			consumers = append(consumers, r.Consumer)
		}
	}
	for _, c := range consumers {
		if _, err := inv.Release(ctx, c, nil); err != nil {
			t.Fatal(err)
		}
	}
	list, err = inv.List(ctx, Filter{NeedsCleaning: true})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%s: %d claims for %d one-time-use devices: %d won, %d refused (no device available), %d distinct devices claimed, %d in use and %d burned after the claims, %d needing cleaning after release; %d compare-and-swap conflicts retried\n",
		t.Name(), len(results), poolSize, won, unavailable, len(byAddr), inUse, burned, len(list), conflicts)
	if won != poolSize || len(byAddr) != poolSize || unavailable != len(results)-poolSize || inUse != poolSize || burned != poolSize || len(list) != poolSize {
		t.Fatalf("want %d won, %d distinct, %d refused, %d in use, %d burned, %d needing cleaning", poolSize, poolSize, len(results)-poolSize, poolSize, poolSize, poolSize)
	}
}

// 200 goroutines race for 20 one-time-use devices on bolt.
func TestConcurrentClaimsBolt(t *testing.T) {
	inv := newInventory(t, openBolt(t, t.TempDir()), "h1", poolSpec, pool(poolSize), nil)
	results := claimMany(inv, "g", claims)
	checkClaims(t, inv, results, inv.Conflicts())
}

// 200 claims from two processes (100 goroutines each) on one real Redis,
// and on a real three-node Redis Cluster.
func TestConcurrentClaimsTwoProcessesRedis(t *testing.T) {
	t.Run("single", func(t *testing.T) { testClaimsTwoProcesses(t, testenv.StartRedis(t)) })
	t.Run("cluster", func(t *testing.T) { testClaimsTwoProcesses(t, testenv.ClusterURL(testenv.StartRedisCluster(t))) })
}

func testClaimsTwoProcesses(t *testing.T, url string) {
	inv := newInventory(t, openRedis(t, url), "h1", poolSpec, pool(poolSize), nil)
	var results []claimResult
	var conflicts int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for p := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := runHelper(t, "claim", url, fmt.Sprintf("p%d", p), strconv.Itoa(claims/2))
			var run claimRun
			if err := json.Unmarshal(out, &run); err != nil {
				t.Errorf("process %d: %v: %s", p, err, out)
				return
			}
			mu.Lock()
			results = append(results, run.Results...)
			conflicts += run.Conflicts
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	checkClaims(t, inv, results, conflicts)
}

// runHelper runs this test binary as a helper process (TestHelperProcess)
// and returns its stdout.
func runHelper(t *testing.T, args ...string) []byte {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), "VMETA_DEVICES_HELPER="+strings.Join(args, "\x1f"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Errorf("helper %v: %v", args, err)
	}
	return out
}

// TestHelperProcess is the helper process of the multi-process tests:
// not a test of its own.
func TestHelperProcess(t *testing.T) {
	env := os.Getenv("VMETA_DEVICES_HELPER")
	if env == "" {
		t.Skip("helper process only")
	}
	args := strings.Split(env, "\x1f")
	spec, err := ParseSpec([]byte(poolSpec))
	if err != nil {
		t.Fatal(err)
	}
	var b backend
	if strings.HasPrefix(args[1], "redis") {
		b = openRedis(t, args[1])
	} else {
		b = openBolt(t, args[1])
	}
	inv, err := New(b.st, Options{Host: "h1", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	switch args[0] {
	case "claim": // claim PREFIX N: N concurrent claims, JSON results on stdout
		n, _ := strconv.Atoi(args[3])
		rs := claimMany(inv, args[2], n)
		out, _ := json.Marshal(claimRun{Results: rs, Conflicts: inv.Conflicts()})
		os.Stdout.Write(out)
	case "claim-and-hang": // claim one gpu, say so, and wait to be killed
		held, _, err := inv.Claim(context.Background(), Consumer{UUID: "crash-1", Name: "crash-vm"}, []model.PCIAlias{{Name: "gpu", Count: 1}})
		if err != nil {
			fmt.Println("ERROR", err)
			os.Exit(1)
		}
		fmt.Println("CLAIMED", held[0].Address)
		select {} // "between the claim and the domain start"
	}
	os.Exit(0)
}

// hostctl is SIGKILLed between the claim and the domain start; at the
// restart the device is still burned and needs cleaning: it is never
// silently returned to the pool.
func TestKilledBetweenClaimAndStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		dsn  func(t *testing.T) string
		open func(t *testing.T, dsn string) backend
	}{
		{"bolt", func(t *testing.T) string { return t.TempDir() }, func(t *testing.T, d string) backend { return openBolt(t, d) }},
		{"redis", func(t *testing.T) string { return testenv.StartRedis(t) }, func(t *testing.T, u string) backend { return openRedis(t, u) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := tc.dsn(t)
			{ // the first start: sync the inventory, then let go of the store
				b := tc.open(t, dsn)
				newInventory(t, b, "h1", poolSpec, pool(2), nil)
				if c, ok := b.st.(interface{ Close() error }); ok {
					c.Close()
				}
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
			cmd.Env = append(os.Environ(), "VMETA_DEVICES_HELPER="+strings.Join([]string{"claim-and-hang", dsn}, "\x1f"))
			cmd.Stderr = os.Stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "CLAIMED ") {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("helper said %q, %v", line, err)
			}
			addr := strings.TrimSpace(strings.TrimPrefix(line, "CLAIMED "))
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			err = cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("helper ended with %v, want killed by SIGKILL", err)
			}

			// The restart: sync, then release what no instance holds.
			b := tc.open(t, dsn)
			inv := newInventory(t, b, "h1", poolSpec, pool(2), nil)
			wantCounters(t, inv, addr, `total=1 reserved=1 used=1 consumer="crash-vm" needs_cleaning=false traits=[HW_PCI_ONE_TIME_USE]`)
			rel, err := inv.ReleaseOrphans(t.Context(), func(string) bool { return false })
			if err != nil || len(rel) != 1 || rel[0].Address != addr {
				t.Fatalf("ReleaseOrphans = %+v, %v", rel, err)
			}
			wantCounters(t, inv, addr, `total=1 reserved=1 used=0 consumer="crash-vm" needs_cleaning=true traits=[HW_PCI_ONE_TIME_USE]`)
			nc, _ := inv.List(t.Context(), Filter{NeedsCleaning: true})
			if len(nc) != 1 || nc[0].Address != addr {
				t.Fatalf("needs cleaning: %+v", nc)
			}
			// Two more claims: one gets the other device, the next none.
			held, _, err := inv.Claim(t.Context(), Consumer{UUID: "u-2", Name: "vm2"}, []model.PCIAlias{{Name: "gpu", Count: 1}})
			if err != nil || held[0].Address == addr {
				t.Fatalf("claim after the crash = %+v, %v; want the other device", held, err)
			}
			_, _, err = inv.Claim(t.Context(), Consumer{UUID: "u-3", Name: "vm3"}, []model.PCIAlias{{Name: "gpu", Count: 1}})
			if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "1 burned awaiting cleaning, 1 in use") {
				t.Fatalf("third claim = %v", err)
			}
		})
	}
}
