package controller

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/passthrough"
	"github.com/vmeta/vmeta/hostctl/parts/watchdog"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

var reWatchdog = regexp.MustCompile(`<watchdog model="i6300esb" action="([a-z]+)"`)

// watchdogOf is the action of the watchdog in the fake libvirt's
// definition of name ("" without one); more than one is an error.
func watchdogOf(t *testing.T, e *env, name string) string {
	t.Helper()
	e.hv.mu.Lock()
	defer e.hv.mu.Unlock()
	d := e.hv.domains[name]
	if d == nil {
		t.Fatalf("no domain %s", name)
	}
	m := reWatchdog.FindAllStringSubmatch(d.xml, -1)
	switch len(m) {
	case 0:
		return ""
	case 1:
		return m[0][1]
	}
	t.Fatalf("%d watchdogs in\n%s", len(m), d.xml)
	return ""
}

func hostDevicesOf(inst *Instance) []string {
	var out []string
	for _, d := range inst.HostDevices {
		out = append(out, d.Kind+": "+d.Detail)
	}
	return out
}

// TestWatchdogPart: the watchdog part, registered with the core, puts
// the flavor's hw:watchdog_action (or the image's hw_watchdog_action,
// which wins) into every domain the core builds — apply, rebuild,
// resize, unshelve — and instance show lists it; a value that is not
// one of Nova's is refused naming it, changing nothing.
func TestWatchdogPart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.c.parts = []part.Part{boundStates(e.c), watchdog.New()} // boundStates: export_vmstate_test.go
	flavorSetup(e)
	ctx := context.Background()
	for _, f := range []flavors.Flavor{
		{Name: "f.wd", VCPUs: 1, RAM: 128, Disk: 1, Swap: 16, ExtraSpecs: map[string]string{watchdog.FlavorExtraSpec: "reset"}},
		{Name: "f.wdbig", VCPUs: 2, RAM: 256, Disk: 2, Swap: 32, ExtraSpecs: map[string]string{watchdog.FlavorExtraSpec: "poweroff"}},
		{Name: "f.wdbad", VCPUs: 1, RAM: 128, Disk: 1, Swap: 16, ExtraSpecs: map[string]string{watchdog.FlavorExtraSpec: "dump"}},
	} {
		if _, err := e.Catalog().CreateFlavor(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(t.TempDir(), "src")
	if out, err := exec.Command(e.qemuImg, "create", "-q", "-f", "qcow2", p, "16M").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Catalog().ImportImage(ctx, "deb-pause", map[string]string{watchdog.ImageProperty: "pause"}, bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}

	// A plain flavor: no watchdog.
	e.mustApply(flavorSpec)
	if got := watchdogOf(t, e, "app-1"); got != "" {
		t.Errorf("f.small: watchdog %q, want none", got)
	}
	if err := e.c.Delete(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}

	inst := e.mustApply(strings.Replace(flavorSpec, "flavor: f.small", "flavor: f.wd", 1))
	if got := watchdogOf(t, e, "app-1"); got != "reset" {
		t.Errorf("apply: watchdog %q, want reset", got)
	}
	shown, err := e.c.Get(ctx, "app-1")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(hostDevicesOf(shown), ";"); got != "watchdog: i6300esb, action reset" {
		t.Errorf("instance show: host devices %q", got)
	}
	_ = inst

	// Rebuild onto an image whose property wins over the flavor.
	if _, err := e.c.Rebuild(ctx, "app-1", "deb-pause"); err != nil {
		t.Fatal(err)
	}
	if got := watchdogOf(t, e, "app-1"); got != "pause" {
		t.Errorf("rebuild: watchdog %q, want pause (the image's)", got)
	}
	// Resize: the image's still wins.
	if _, err := e.c.Resize(ctx, "app-1", "f.wdbig"); err != nil {
		t.Fatal(err)
	}
	if got := watchdogOf(t, e, "app-1"); got != "pause" {
		t.Errorf("resize: watchdog %q, want pause", got)
	}

	// Shelve undefines the domain; unshelve defines it again, watchdog
	// carried.
	if _, err := e.c.Shelve(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Unshelve(ctx, "app-1"); err != nil {
		t.Fatal(err)
	}
	if got := watchdogOf(t, e, "app-1"); got != "pause" {
		t.Errorf("unshelve: watchdog %q, want pause", got)
	}
	if _, err := e.c.Stop(ctx, "app-1", time.Millisecond); err != nil {
		t.Fatal(err)
	}

	// A bad action: refused naming the extra spec and its value; nothing
	// of app-2 exists.
	bad := strings.NewReplacer("flavor: f.small", "flavor: f.wdbad", "name: app-1", "name: app-2", "10.1.0.8", "10.1.0.9", "52:54:00:00:00:11", "52:54:00:00:00:12").Replace(flavorSpec)
	before := e.snapshot()
	_, err = e.apply(bad)
	var se *model.SpecError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), `flavor f.wdbad extra_specs.hw:watchdog_action: "dump"`) {
		t.Fatalf("bad action: err = %v, want a spec error naming the extra spec and its value", err)
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused apply changed something:\n%s", diffLines(before, after))
	}
}

// TestShelveReleasesDevices: shelve gives the instance's passthrough
// claims back (a one-time-use device stays burned, needing cleaning);
// unshelve claims again — another gpu, since the first is burned — and
// publishes the spec with it; with no gpu left, unshelve is refused
// naming the claim, and the instance stays shelved, holding nothing.
func TestShelveReleasesDevices(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	inv := withDevices(t, e)
	e.c.parts = []part.Part{boundStates(e.c), passthrough.New(inv)} // boundStates: export_vmstate_test.go
	ctx := context.Background()
	e.mustApply("name: vm1\ndisks: [{name: vda, size: 8M}]\npci_aliases: [{name: gpu, tag: ml}]\n")
	held := func() []string {
		t.Helper()
		h, err := inv.HeldBy(ctx, mustUUID(t, e, "vm1"))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	first := held()
	if len(first) != 1 {
		t.Fatalf("held after apply: %v", first)
	}
	if _, err := e.c.Shelve(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	if h := held(); len(h) != 0 {
		t.Fatalf("held after shelve: %v, want nothing", h)
	}
	d, err := inv.Show(ctx, first[0])
	if err != nil {
		t.Fatal(err)
	}
	if !d.NeedsCleaning || d.Used != 0 {
		t.Fatalf("the released one-time-use device: %+v, want burned (needs cleaning) and free", d)
	}
	// A start of the shelved instance claims nothing.
	if _, err := e.c.Start(ctx, "vm1"); !errors.Is(err, ErrState) {
		t.Fatalf("start of a shelved instance = %v", err)
	}
	if h := held(); len(h) != 0 {
		t.Fatalf("held after a refused start: %v", h)
	}

	got, err := e.c.Unshelve(ctx, "vm1")
	if err != nil {
		t.Fatal(err)
	}
	second := held()
	if len(second) != 1 || second[0] == first[0] {
		t.Fatalf("held after unshelve: %v (before shelve %v), want the other gpu", second, first)
	}
	var addrs []string
	for _, p := range got.Spec.PCIDevices {
		addrs = append(addrs, p.Address+"/"+p.Tag)
	}
	if len(addrs) != 1 || addrs[0] != second[0]+"/ml" {
		t.Fatalf("published pci_devices %v, want %s/ml", addrs, second[0])
	}
	e.hv.mu.Lock()
	xml := e.hv.domains["vm1"].xml
	e.hv.mu.Unlock()
	if want := `bus="0x` + second[0][5:7] + `"`; !strings.Contains(xml, want) || strings.Contains(xml, `bus="0x`+first[0][5:7]+`"`) {
		t.Errorf("the domain does not name the new device %s:\n%s", second[0], xml)
	}

	// Shelve again: the second gpu is burned too; no gpu is left.
	if _, err := e.c.Stop(ctx, "vm1", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Shelve(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot()
	if _, err := e.c.Unshelve(ctx, "vm1"); err == nil || !strings.Contains(err.Error(), "claim the passthrough devices again") {
		t.Fatalf("unshelve with no gpu left = %v", err)
	}
	if h := held(); len(h) != 0 {
		t.Fatalf("held after a refused unshelve: %v", h)
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused unshelve changed something:\n%s", diffLines(before, after))
	}
	if st, _ := e.c.Get(ctx, "vm1"); st.State != StateShelved {
		t.Errorf("state after a refused unshelve: %q", st.State)
	}
}

func mustUUID(t *testing.T, e *env, name string) string {
	t.Helper()
	rec, err := e.st.Instance(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return rec.UUID
}

// recorder is a part that records the phases the core calls and refuses
// the operations in refuse.
type recorder struct {
	mu     sync.Mutex
	calls  []string
	refuse map[part.Op]string
}

func (r *recorder) Name() string { return "recorder" }
func (r *recorder) Answers() part.Answers {
	a := part.Answers{}
	for _, op := range part.Ops() {
		a[op] = part.Answer{Do: part.Act}
		if why, ok := r.refuse[op]; ok {
			a[op] = part.Answer{Do: part.Refuse, Why: why}
		}
	}
	return a
}
func (r *recorder) add(s string) { r.mu.Lock(); r.calls = append(r.calls, s); r.mu.Unlock() }
func (r *recorder) Check(_ context.Context, op part.Op, in *part.Instance) error {
	r.add("check " + string(op))
	if _, ok := r.refuse[op]; ok {
		return part.Refusal(r, op, in)
	}
	return nil
}
func (r *recorder) Prepare(_ context.Context, op part.Op, _ *part.Instance, _ *revert.Reverter, _ *part.Contribution) error {
	r.add("prepare " + string(op))
	return nil
}
func (r *recorder) Devices(*part.Instance) ([]part.Device, error) { return nil, nil }
func (r *recorder) AfterStart(context.Context, *part.Instance) error {
	r.add("after start")
	return nil
}
func (r *recorder) AfterStop(context.Context, *part.Instance) error {
	r.add("after stop")
	return nil
}
func (r *recorder) AfterDelete(context.Context, *part.Instance) error {
	r.add("after delete")
	return nil
}

// TestCorePhases: the core calls a part's phases in their order for each
// operation, and a part's refusal stops the operation (409 naming the
// part and its reason) before anything changes.
func TestCorePhases(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := &recorder{refuse: map[part.Op]string{part.RebootHard: "the recorder says no"}}
	e.c.parts = []part.Part{rec}
	ctx := context.Background()
	e.mustApply("name: vm1\ndisks: [{name: vda, size: 8M}]\n")
	if _, err := e.c.Start(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot()
	_, err := e.c.Reboot(ctx, "vm1", true)
	var re *part.RefusedError
	if !errors.Is(err, ErrState) || !errors.As(err, &re) || !strings.Contains(err.Error(), "refused by recorder: the recorder says no") {
		t.Fatalf("reboot refused by a part = %v", err)
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused reboot changed something:\n%s", diffLines(before, after))
	}
	if _, err := e.c.Stop(ctx, "vm1", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	want := []string{"check apply", "prepare apply", "check start", "after start", "check reboot-hard", "check stop", "after stop", "check delete", "after delete"}
	if got := strings.Join(rec.calls, ", "); got != strings.Join(want, ", ") {
		t.Fatalf("phases:\n got %s\nwant %s", got, strings.Join(want, ", "))
	}
}
