package serve

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/cli"
	"github.com/vmeta/vmeta/hostctl/devices"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store/bolt"
	"github.com/vmeta/vmeta/internal/store/storeurl"
	"github.com/vmeta/vmeta/internal/testenv"
)

// gpuSysfs writes a sysfs tree as the kernel lays it out with two NVIDIA
// A100s (10de:20b5) at 0000:3b:00.0 and 0000:3c:00.0.
func gpuSysfs(t *testing.T) string {
	root := t.TempDir()
	bus := filepath.Join(root, "bus", "pci", "devices")
	os.MkdirAll(bus, 0o755)
	for _, a := range []string{"0000:3b:00.0", "0000:3c:00.0"} {
		dir := filepath.Join(root, "devices", "pci0000:00", a)
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "vendor"), []byte("0x10de\n"), 0o444)
		os.WriteFile(filepath.Join(dir, "device"), []byte("0x20b5\n"), 0o444)
		os.WriteFile(filepath.Join(dir, "class"), []byte("0x030200\n"), 0o444)
		if err := os.Symlink("../../../devices/pci0000:00/"+a, filepath.Join(bus, a)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

type daemonRun struct {
	t      *testing.T
	sock   string
	stderr *testenv.SyncBuffer
}

// serveDevices starts `hostctl serve` in-process with a device spec of
// two one-time-use gpus and a cleanup hook that copies its stdin to
// dir/hook-<address>.json.
func serveDevices(t *testing.T, dir string, extra ...string) *daemonRun {
	spec := filepath.Join(dir, "devices.yaml")
	if _, err := os.Stat(spec); err != nil {
		os.WriteFile(spec, []byte("devices:\n  - vendor_id: \"10de\"\n    alias: gpu\n    one_time_use: true\n"), 0o600)
	}
	hook := `f=$(mktemp ` + dir + `/hook.XXXXXX); cat > $f; echo '{"message":"wipe queued"}'`
	var stdout, stderr testenv.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	sock := filepath.Join(dir, "s.sock")
	go func() {
		done <- run(ctx, append([]string{"serve", "--data-dir", filepath.Join(dir, "data"), "--socket", sock,
			"--metadata-listen", "127.0.0.1:0", "--virt", "none", "--host", "gpu-host",
			"--device-spec", spec, "--sysfs-root", gpuSysfs(t), "--cleanup-hook", hook,
		}, extra...), cli.Env{Stdout: &stdout, Stderr: &stderr, Stdin: strings.NewReader("")})
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d:\n%s", code, stderr.String())
		}
	})
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(stderr.String(), "hostctl serving"); {
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return &daemonRun{t: t, sock: sock, stderr: &stderr}
}

// hostctl runs a client command against the daemon; it returns the exit
// code and stdout+stderr.
func (d *daemonRun) hostctl(args ...string) (int, string) {
	var out testenv.SyncBuffer
	args = append(args, "--socket", d.sock)
	code := cli.Run(context.Background(), args, cli.Env{Stdout: &out, Stderr: &out, Stdin: strings.NewReader("")}, Command())
	return code, out.String()
}

// applyGPUInstance applies vm1, an instance asking for one device of
// alias gpu (its spec in dir), and returns the device it holds.
func (d *daemonRun) applyGPUInstance(dir string) types.Device {
	d.t.Helper()
	vm := filepath.Join(dir, "vm.yaml")
	os.WriteFile(vm, []byte("name: vm1\npci_aliases: [{name: gpu}]\n"), 0o600)
	if code, out := d.hostctl("instance", "apply", "-f", vm); code != 0 {
		d.t.Fatalf("apply: %s", out)
	}
	var held types.Device
	for _, dev := range d.devices() {
		if dev.Used == 1 {
			held = dev
		}
	}
	return held
}

func (d *daemonRun) devices(args ...string) []types.Device {
	d.t.Helper()
	code, out := d.hostctl(append([]string{"device", "list", "--output", "json"}, args...)...)
	if code != 0 {
		d.t.Fatalf("device list: %d %s", code, out)
	}
	var l types.DeviceList
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		d.t.Fatalf("device list --output json: %v\n%s", err, out)
	}
	return l.Devices
}

// The operator's workflow through `hostctl serve` and the CLI: an
// instance asking for a gpu gets one (burned), the other instances are
// told what the pool holds, deleting it leaves the device needing
// cleaning and runs the cleanup hook, and `hostctl device clean` brings
// it back.
func TestServeOneTimeUseDevices(t *testing.T) {
	dir := t.TempDir()
	d := serveDevices(t, dir)
	if l := d.devices(); len(l) != 2 || l[0].Host != "gpu-host" || l[0].Traits[0] != types.TraitOneTimeUse {
		t.Fatalf("inventory %+v", l)
	}
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o600)
		return p
	}
	if code, out := d.hostctl("instance", "apply", "-f", write("vm1.yaml", "name: vm1\npci_aliases:\n  - name: gpu\n")); code != 0 {
		t.Fatalf("apply vm1: %s", out)
	}
	code, out := d.hostctl("instance", "show", "vm1", "--output", "json")
	var inst types.Instance
	if code != 0 || json.Unmarshal([]byte(out), &inst) != nil || len(inst.Spec.PCIDevices) != 1 || inst.Spec.PCIDevices[0].Alias != "gpu" || !inst.Spec.PCIDevices[0].OneTimeUse {
		t.Fatalf("vm1: %s", out)
	}
	addr := inst.Spec.PCIDevices[0].Address
	// Nothing about the device or its burning reaches the guest: the
	// config drive (the whole guest-visible tree) does not name it.
	iso := filepath.Join(dir, "vm1.iso")
	if code, out := d.hostctl("configdrive", "build", "vm1", "-o", iso); code != 0 {
		t.Fatalf("configdrive build: %s", out)
	}
	drive, err := os.ReadFile(iso)
	if err != nil || !strings.Contains(string(drive), "meta_data.json") {
		t.Fatalf("config drive: %v", err)
	}
	for _, leak := range []string{addr, "one_time_use", "HW_PCI", "pci_aliases"} {
		if strings.Contains(string(drive), leak) {
			t.Errorf("the guest's config drive contains %q", leak)
		}
	}
	// Re-applying keeps the device.
	if code, out := d.hostctl("instance", "apply", "-f", filepath.Join(dir, "vm1.yaml")); code != 0 {
		t.Fatalf("re-apply vm1: %s", out)
	}
	if held := d.devices("--trait", types.TraitOneTimeUse); countUsed(held) != 1 {
		t.Fatalf("after re-apply: %+v", held)
	}
	other := "0000:3b:00.0"
	if addr == other {
		other = "0000:3c:00.0"
	}
	for _, tc := range []struct{ spec, want string }{
		{"name: vm2\npci_devices:\n  - address: \"" + other + "\"\n", `pci_devices[0].address: "` + other + `": is a device of this host's inventory (alias gpu): request it through pci_aliases`},
		{"name: vm2\npci_aliases:\n  - name: fpga\n", `pci_aliases[0].name: "fpga": unknown alias`},
		{"name: vm2\npci_aliases:\n  - name: gpu\n    count: 3\n", `pci_aliases[0].count: 3: more than the 2 devices of alias gpu on host gpu-host`},
	} {
		if code, out := d.hostctl("instance", "apply", "-f", write("vm2.yaml", tc.spec)); code == 0 || !strings.Contains(out, tc.want) {
			t.Errorf("apply %q: exit %d %s\nwant %q", tc.spec, code, out, tc.want)
		}
	}
	if code, out := d.hostctl("instance", "apply", "-f", write("vm2.yaml", "name: vm2\npci_aliases:\n  - name: gpu\n")); code != 0 {
		t.Fatalf("apply vm2: %s", out)
	}
	want := "no device available for vm3: alias gpu: 0 burned awaiting cleaning, 2 in use"
	if code, out := d.hostctl("instance", "apply", "-f", write("vm3.yaml", "name: vm3\npci_aliases:\n  - name: gpu\n")); code == 0 || !strings.Contains(out, want) {
		t.Fatalf("apply vm3: exit %d %s\nwant %q", code, out, want)
	}
	if code, out := d.hostctl("device", "clean", addr); code == 0 || !strings.Contains(out, "is in use by instance vm1") {
		t.Fatalf("clean in use: %d %s", code, out)
	}
	if code, out := d.hostctl("instance", "delete", "vm1"); code != 0 {
		t.Fatalf("delete vm1: %s", out)
	}
	nc := d.devices("--needs-cleaning")
	if len(nc) != 1 || nc[0].Address != addr || nc[0].ConsumerName != "vm1" {
		t.Fatalf("needs cleaning after delete: %+v", nc)
	}
	want = "no device available for vm3: alias gpu: 1 burned awaiting cleaning, 1 in use"
	if code, out := d.hostctl("instance", "apply", "-f", filepath.Join(dir, "vm3.yaml")); code == 0 || !strings.Contains(out, want) {
		t.Fatalf("apply vm3 with vm1's device burned: exit %d %s\nwant %q", code, out, want)
	}
	// The cleanup hook ran with the record and reported.
	var shown types.Device
	for deadline := time.Now().Add(30 * time.Second); ; {
		code, out := d.hostctl("device", "show", addr, "--output", "json")
		if code != 0 || json.Unmarshal([]byte(out), &shown) != nil {
			t.Fatalf("device show: %s", out)
		}
		if shown.LastCleanupHook != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cleanup hook did not report: %+v\n%s", shown, d.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if shown.LastCleanupHook.Outcome != "ok" || shown.LastCleanupHook.Message != "wipe queued" {
		t.Fatalf("hook outcome %+v", shown.LastCleanupHook)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "hook.*"))
	if len(files) != 1 {
		t.Fatalf("hook files %v", files)
	}
	b, _ := os.ReadFile(files[0])
	if !strings.Contains(string(b), `"address":"`+addr+`"`) {
		t.Fatalf("hook stdin %s", b)
	}
	if code, out := d.hostctl("device", "show", addr); code != 0 || !strings.Contains(out, "needs-cleaning") || !strings.Contains(out, "1/1/0") {
		t.Fatalf("device show: %s", out)
	}
	if code, out := d.hostctl("device", "clean", "3b:00.0"); code == 0 || !strings.Contains(out, "is not a PCI address") {
		t.Fatalf("clean of a bad address: %d %s", code, out)
	}
	if code, out := d.hostctl("device", "clean", addr); code != 0 || !strings.Contains(out, "is clean") {
		t.Fatalf("clean: %d %s", code, out)
	}
	if code, out := d.hostctl("instance", "apply", "-f", filepath.Join(dir, "vm3.yaml")); code != 0 {
		t.Fatalf("apply vm3 after cleaning: %s", out)
	}
	code, out = d.hostctl("device", "list")
	if code != 0 || !regexp.MustCompile(`gpu-host\s+`+regexp.QuoteMeta(addr)+`\s+gpu\s+10de:20b5\s+1\s+1\s+1\s+in-use\s+vm3`).MatchString(out) {
		t.Fatalf("device list:\n%s", out)
	}
}

func countUsed(l []types.Device) int {
	n := 0
	for _, d := range l {
		n += d.Used
	}
	return n
}

// hostctl died after claiming a device and before the instance existed
// (the claim is in the store, the instance is not): the next `hostctl
// serve` releases it, burned, as needing cleaning.
func TestServeReleasesOrphanedClaim(t *testing.T) {
	dir := t.TempDir()
	{
		st, err := bolt.Open(storeurl.EmbeddedPath(filepath.Join(dir, "data")))
		if err != nil {
			t.Fatal(err)
		}
		spec, _ := devices.ParseSpec([]byte(`[{"vendor_id":"10de","alias":"gpu","one_time_use":true}]`))
		inv, err := devices.New(st, devices.Options{Host: "gpu-host", Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		found, err := devices.Discover(gpuSysfs(t))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inv.Sync(t.Context(), found); err != nil {
			t.Fatal(err)
		}
		if _, _, err := inv.Claim(t.Context(), devices.Consumer{UUID: "11111111-2222-4333-8444-555555555555", Name: "lost"}, []model.PCIAlias{{Name: "gpu", Count: 1}}); err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
	d := serveDevices(t, dir)
	nc := d.devices("--needs-cleaning")
	if len(nc) != 1 || nc[0].ConsumerName != "lost" || nc[0].Used != 0 || nc[0].Reserved != 1 {
		t.Fatalf("after the restart: %+v", nc)
	}
	if !strings.Contains(d.stderr.String(), "device held by an instance this host does not have") {
		t.Errorf("no log line about the orphaned claim:\n%s", d.stderr.String())
	}
}

// A bad device spec stops `hostctl serve` with an error naming the flag,
// the entry and the field.
func TestServeDeviceSpecErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ spec, want string }{
		{"devices:\n  - address: \"3b:00.0\"\n    alias: gpu\n", `--device-spec: invalid device spec ` + dir + `/spec.yaml: devices[0].address: "3b:00.0": is not a PCI address`},
		{"devices:\n  - address: \"0000:3b:00.0\"\n    alias: gpu\n  - address: \"0000:3b:00.0\"\n    alias: nvme\n", `devices[1].address: "0000:3b:00.0": duplicate of devices[0]`},
		{"devices:\n  - vendor_id: \"10de\"\n    alias: gpu\n    one_time: true\n", `unknown field "one_time"`},
		// Both entries match the gpus sysfs has.
		{"devices:\n  - vendor_id: \"10de\"\n    alias: gpu\n  - address: \"0000:3b:00.0\"\n    alias: one\n", `devices[1]: "0000:3b:00.0": matches the same device as devices[0]`},
	} {
		spec := filepath.Join(dir, "spec.yaml")
		os.WriteFile(spec, []byte(tc.spec), 0o600)
		var stderr testenv.SyncBuffer
		code := run(t.Context(), []string{"serve", "--data-dir", filepath.Join(dir, "data"), "--socket", filepath.Join(dir, "s.sock"),
			"--metadata-listen", "127.0.0.1:0", "--virt", "none", "--device-spec", spec, "--sysfs-root", gpuSysfs(t)},
			cli.Env{Stdout: &stderr, Stderr: &stderr})
		if code == 0 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("spec %q: exit %d\n%s\nwant %q", tc.spec, code, stderr.String(), tc.want)
		}
	}
}

// The operator marks the gpus one-time-use while one is in use: the next
// device sync (no restart) burns it, and its release leaves it needing
// cleaning.
func TestServeHealsDeviceMarkedOneTimeUse(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "devices.yaml")
	os.WriteFile(spec, []byte("devices:\n  - vendor_id: \"10de\"\n    alias: gpu\n"), 0o600)
	d := serveDevices(t, dir, "--device-sync-interval", "20ms")
	held := d.applyGPUInstance(dir)
	if held.Reserved != 0 || held.OneTimeUse {
		t.Fatalf("before the mark: %+v", held)
	}
	os.WriteFile(spec+".new", []byte("devices:\n  - vendor_id: \"10de\"\n    alias: gpu\n    one_time_use: true\n"), 0o600)
	os.Rename(spec+".new", spec)
	for deadline := time.Now().Add(30 * time.Second); ; {
		code, out := d.hostctl("device", "show", held.Address, "--output", "json")
		var dev types.Device
		if code != 0 || json.Unmarshal([]byte(out), &dev) != nil {
			t.Fatalf("device show: %s", out)
		}
		if dev.Reserved == 1 {
			if !dev.OneTimeUse || dev.Used != 1 || dev.Traits[0] != types.TraitOneTimeUse {
				t.Fatalf("healed device: %+v", dev)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the in-use device was not burned after the spec marked it one-time-use: %+v\n%s", dev, d.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, out := d.hostctl("instance", "delete", "vm1"); code != 0 {
		t.Fatalf("delete: %s", out)
	}
	if nc := d.devices("--needs-cleaning"); len(nc) != 1 || nc[0].Address != held.Address {
		t.Fatalf("needs cleaning: %+v", nc)
	}
	// The heal is logged after its write, so maybe after the store shows it.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(d.stderr.String(), "healed into reserved"); {
		if time.Now().After(deadline) {
			t.Fatalf("no log line about the heal:\n%s", d.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Issue 20 items 14 and 15 through `hostctl serve` and the CLI: an
// unknown --trait (the specification's tentative HW_ONE_TIME_USE) is
// refused naming the traits vmeta sets; a gpu burned while one-time-use
// and un-marked by the operator (the next device sync) while in use is,
// once its instance is deleted, listed by --needs-cleaning, shown as
// needs-cleaning, and its device.released event says needs_cleaning: true
// (what examples/device-cleanup-listener.sh acts on).
func TestServeUnmarkedDeviceNeedsCleaning(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "devices.yaml")
	d := serveDevices(t, dir, "--device-sync-interval", "20ms")

	for _, tr := range []string{"HW_ONE_TIME_USE", "hw_pci_one_time_use"} {
		code, out := d.hostctl("device", "list", "--trait", tr)
		t.Logf("device list --trait %s: exit %d: %s", tr, code, out)
		if code == 0 || !strings.Contains(out, `trait: "`+tr+`": unknown trait: vmeta sets only HW_PCI_ONE_TIME_USE`) {
			t.Errorf("device list --trait %s: exit %d %s", tr, code, out)
		}
	}
	if l := d.devices("--trait", types.TraitOneTimeUse); len(l) != 2 {
		t.Fatalf("--trait %s: %+v", types.TraitOneTimeUse, l)
	}

	held := d.applyGPUInstance(dir)
	if held.Reserved != 1 {
		t.Fatalf("not burned: %+v", held)
	}
	os.WriteFile(spec+".new", []byte("devices:\n  - vendor_id: \"10de\"\n    alias: gpu\n"), 0o600)
	os.Rename(spec+".new", spec)
	for deadline := time.Now().Add(30 * time.Second); len(d.devices("--trait", types.TraitOneTimeUse)) != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the device sync did not un-mark the gpus:\n%s", d.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, out := d.hostctl("instance", "delete", "vm1"); code != 0 {
		t.Fatalf("delete: %s", out)
	}
	if nc := d.devices("--needs-cleaning"); len(nc) != 1 || nc[0].Address != held.Address || nc[0].OneTimeUse || len(nc[0].Traits) != 0 {
		t.Fatalf("needs cleaning: %+v; want %s, no longer one-time-use", nc, held.Address)
	}
	if code, out := d.hostctl("device", "show", held.Address); code != 0 || !strings.Contains(out, "needs-cleaning") {
		t.Fatalf("device show: %s", out)
	}
	code, out := d.hostctl("events", "list", "devices", "--output", "json")
	var evs []types.Event
	if code != 0 || json.Unmarshal([]byte(out), &evs) != nil {
		t.Fatalf("events list: %d %s", code, out)
	}
	released := 0
	for _, ev := range evs {
		var dev types.Device
		if ev.Type != "device.released" || json.Unmarshal(ev.Payload, &dev) != nil {
			continue
		}
		released++
		if dev.Address != held.Address || !dev.NeedsCleaning {
			t.Errorf("device.released %s", ev.Payload)
		}
	}
	if released != 1 {
		t.Fatalf("%d device.released events:\n%s", released, out)
	}
}

// Issue 20 item 13 through `hostctl serve` and the CLI: a device outside
// the device spec named in pci_devices with one_time_use is burned while
// the instance holds it, refused to another instance, needs cleaning
// after delete, and is usable again once cleaned.
func TestServeDirectOneTimeUse(t *testing.T) {
	dir := t.TempDir()
	d := serveDevices(t, dir)
	const addr = "0000:d8:00.0"
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o600)
		return p
	}
	if code, out := d.hostctl("instance", "apply", "-f", write("vm1.yaml", "name: vm1\npci_devices:\n  - address: \""+addr+"\"\n    one_time_use: true\n")); code != 0 {
		t.Fatalf("apply vm1: %s", out)
	}
	code, out := d.hostctl("device", "list")
	if code != 0 || !regexp.MustCompile(`gpu-host\s+`+regexp.QuoteMeta(addr)+`\s+-\s+-\s+1\s+1\s+1\s+in-use\s+vm1\s+HW_PCI_ONE_TIME_USE`).MatchString(out) {
		t.Fatalf("device list:\n%s", out)
	}
	vm2 := write("vm2.yaml", "name: vm2\npci_devices:\n  - address: \""+addr+"\"\n")
	if code, out := d.hostctl("instance", "apply", "-f", vm2); code == 0 || !strings.Contains(out, "pci_devices[0] "+addr+": one-time-use, in use by instance vm1") {
		t.Fatalf("apply vm2 naming vm1's device: exit %d %s", code, out)
	}
	if code, out := d.hostctl("instance", "delete", "vm1"); code != 0 {
		t.Fatalf("delete vm1: %s", out)
	}
	if nc := d.devices("--needs-cleaning"); len(nc) != 1 || nc[0].Address != addr {
		t.Fatalf("needs cleaning: %+v", nc)
	}
	if code, out := d.hostctl("instance", "apply", "-f", vm2); code == 0 || !strings.Contains(out, "burned awaiting cleaning") {
		t.Fatalf("apply vm2 naming the burned device: exit %d %s", code, out)
	}
	if code, out := d.hostctl("device", "clean", addr); code != 0 || !strings.Contains(out, "device "+addr+" is clean: reserved 0, usable again in pci_devices") {
		t.Fatalf("clean: %d %s", code, out)
	}
	if code, out := d.hostctl("instance", "apply", "-f", vm2); code != 0 {
		t.Fatalf("apply vm2 after cleaning: %s", out)
	}
}
