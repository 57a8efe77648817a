package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/internal/testenv"
)

// gpuSysfs writes a sysfs tree laid out as the kernel does, with two
// NVIDIA A100s (10de:20b5, class 030200) and a Samsung NVMe drive
// (144d:a80a, class 010802).
func gpuSysfs(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	bus := filepath.Join(root, "bus", "pci", "devices")
	if err := os.MkdirAll(bus, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct{ addr, vendor, device, class string }{
		{"0000:3b:00.0", "0x10de", "0x20b5", "0x030200"},
		{"0000:3c:00.0", "0x10de", "0x20b5", "0x030200"},
		{"0000:5e:00.0", "0x144d", "0xa80a", "0x010802"},
	} {
		dir := filepath.Join(root, "devices", "pci0000:00", d.addr)
		os.MkdirAll(dir, 0o755)
		for name, v := range map[string]string{"vendor": d.vendor, "device": d.device, "class": d.class} {
			os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o444)
		}
		if err := os.Symlink("../../../devices/pci0000:00/"+d.addr, filepath.Join(bus, d.addr)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func deviceList(t *testing.T, d *daemon, args ...string) []types.Device {
	t.Helper()
	r := d.MustCtl(append([]string{"device", "list", "--output", "json"}, args...)...)
	var l types.DeviceList
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil {
		t.Fatalf("device list: %v\n%s", err, r.stdout)
	}
	return l.Devices
}

// startListener runs examples/device-cleanup-listener.sh against d, with
// the hostctl binary on its PATH; it is stopped (SIGTERM) when the test
// ends.
func startListener(t *testing.T, d *daemon) *testenv.Process {
	t.Helper()
	if _, err := exec.LookPath("jq"); err != nil {
		testenv.Require(t, "jq", "the sample cleanup listener needs it (test/setup installs it)")
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(root, "examples", "device-cleanup-listener.sh"))
	cmd.Env = testenv.ChildEnv(nil, "HOSTCTL="+hostctlBin, "VMETA_SOCKET="+d.Socket, "SWEEP_SECONDS=3600",
		"STATE_FILE="+filepath.Join(t.TempDir(), "last-event"))
	// Its own process group, which its TERM trap stops whole.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p, err := testenv.StartProcess(t, "cleanup listener", cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("the listener logged:\n%s", p.Output())
		}
	})
	return p
}

// waitClean polls until no device needs cleaning and addr is free again.
func waitClean(t *testing.T, d *daemon, addr string, l *testenv.Process) types.Device {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := d.MustCtl("device", "show", addr, "--output", "json")
		var dev types.Device
		if err := json.Unmarshal([]byte(r.stdout), &dev); err != nil {
			t.Fatal(err)
		}
		if dev.Reserved == 0 && dev.CleanedAt != nil {
			return dev
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not cleaned: %+v\nlistener:\n%s", addr, dev, l.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The sample cleanup listener (examples/) follows the devices stream of a
// real `hostctl serve`, "wipes" each device released burned and cleans it
// with `hostctl device clean`; started after a release, it catches up by
// sweeping `device list --needs-cleaning`.
func TestDeviceCleanupListener(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := filepath.Join(dir, "devices.yaml")
	os.WriteFile(spec, []byte(`devices:
  - vendor_id: "10de"
    alias: gpu
    one_time_use: true
  - address: "0000:5e:00.0"
    alias: nvme
    one_time_use: true
`), 0o600)
	d := startDaemon(t, daemonOptions{Args: []string{"--host", "gpu-host", "--device-spec", spec, "--sysfs-root", gpuSysfs(t)}})

	// Released before the listener runs: its first sweep cleans it.
	d.Apply("name: early\npci_aliases: [{name: nvme}]\n")
	d.MustCtl("instance", "delete", "early")
	if nc := deviceList(t, d, "--needs-cleaning"); len(nc) != 1 || nc[0].Address != "0000:5e:00.0" {
		t.Fatalf("needs cleaning: %+v", nc)
	}
	l := startListener(t, d)
	waitClean(t, d, "0000:5e:00.0", l)

	// Released while it follows the stream.
	d.Apply("name: vm1\npci_aliases: [{name: gpu, count: 2}]\n")
	d.MustCtl("instance", "delete", "vm1")
	waitClean(t, d, "0000:3b:00.0", l)
	waitClean(t, d, "0000:3c:00.0", l)
	// The listener logs a device's cleaning after `hostctl device clean`
	// returned, which may be after the store shows it: wait for the lines.
	for _, want := range []string{
		"SIMULATED: crypto-erase NVMe drive 0000:5e:00.0 (144d:a80a)",
		"SIMULATED: reset and zero the memory of GPU 0000:3b:00.0 (10de:20b5)",
		"SIMULATED: reset and zero the memory of GPU 0000:3c:00.0",
		"device.released 0000:3b:00.0", "cleaned 0000:3b:00.0", "cleaned 0000:3c:00.0",
	} {
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(l.Output(), want); {
			if time.Now().After(deadline) {
				t.Fatalf("listener output lacks %q:\n%s", want, l.Output())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Back in the pool: an instance gets both gpus again.
	d.Apply("name: vm2\npci_aliases: [{name: gpu, count: 2}]\n")
	if nc := deviceList(t, d, "--needs-cleaning"); len(nc) != 0 {
		t.Fatalf("needs cleaning at the end: %+v", nc)
	}
}

// hostctl (the real binary, on real libvirtd) is SIGKILLed between the
// claim and the domain: the apply has claimed and burned a gpu and is
// creating the instance's disk (a qemu-img on PATH that waits until the
// test has killed hostctl; the disk is encrypted, because hostctl writes
// a blank plain disk itself, without qemu-img). After the restart the device is still burned
// and needs cleaning — never silently back in the pool — and no instance
// or domain exists.
func TestDeviceKilledBetweenClaimAndDomain(t *testing.T) {
	t.Parallel()
	uri := testenv.RequireLibvirt(t)
	requireVirtServe(t)
	realQemuImg := testenv.LookPath(t, "qemu-img")
	dir := t.TempDir()
	wrap := filepath.Join(dir, "bin")
	os.MkdirAll(wrap, 0o755)
	blocked, release := filepath.Join(dir, "blocked"), filepath.Join(dir, "release")
	// The wrapper, orphaned when hostctl is killed, waits until the test
	// releases it or its directory is gone (the temporary directory is
	// removed right after the release: a wrapper asleep then would
	// otherwise wait forever).
	script := "#!/bin/sh\nif [ \"$1\" = create ]; then\n  touch " + blocked + "\n  while [ -d " + dir + " ] && [ ! -e " + release + " ]; do sleep 0.05; done\n  exit 1\nfi\nexec " + realQemuImg + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(wrap, "qemu-img"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(release, nil, 0o644) }) // the orphaned wrapper exits
	spec := filepath.Join(dir, "devices.yaml")
	os.WriteFile(spec, []byte("devices:\n  - vendor_id: \"10de\"\n    alias: gpu\n    one_time_use: true\n"), 0o600)
	args := []string{"--virt", "libvirt", "--libvirt-uri", uri, "--domain-type", "qemu", "--domain-memory", "128",
		"--reconcile-interval", "0", "--host", "gpu-host", "--device-spec", spec, "--sysfs-root", gpuSysfs(t)}
	d := startDaemon(t, daemonOptions{Args: args, Env: []string{"PATH=" + wrap + ":" + os.Getenv("PATH")}})
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)

	apply := exec.Command(hostctlBin, "instance", "apply", "-f",
		writeSpec(t, "name: "+name+"\ndisks: [{name: vda, size: 8M, encrypted: true}]\npci_aliases: [{name: gpu}]\n"), "--socket", d.Socket)
	apply.Env = testenv.ChildEnv(nil)
	var applyOut testenv.SyncBuffer
	apply.Stdout, apply.Stderr = &applyOut, &applyOut
	if err := apply.Start(); err != nil {
		t.Fatal(err)
	}
	defer apply.Wait()
	for deadline := time.Now().Add(60 * time.Second); ; {
		if _, err := os.Stat(blocked); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the apply never reached the disk creation:\n%s\n%s", applyOut.String(), d.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The claim is done (and burned) while the apply is still running.
	var held types.Device
	for _, dev := range deviceList(t, d) {
		if dev.Used == 1 {
			held = dev
		}
	}
	if held.Address == "" || held.Reserved != 1 || held.ConsumerName != name {
		t.Fatalf("during the apply: %+v", deviceList(t, d))
	}
	d.proc.Kill()
	if err := apply.Wait(); err == nil {
		t.Fatalf("the apply succeeded with hostctl killed:\n%s", applyOut.String())
	}
	if out := mustVirsh(t, uri, "list", "--all", "--name"); strings.Contains(out, name) {
		t.Fatalf("a domain was defined before the kill: %s", out)
	}

	d2 := startDaemon(t, daemonOptions{DataDir: d.DataDir, Args: args})
	nc := deviceList(t, d2, "--needs-cleaning")
	if len(nc) != 1 || nc[0].Address != held.Address || nc[0].Used != 0 || nc[0].Reserved != 1 || nc[0].ConsumerName != name {
		t.Fatalf("after the restart, needing cleaning: %+v; want %s", nc, held.Address)
	}
	if r := d2.MustCtl("instance", "list"); strings.Contains(r.stdout, name) {
		t.Fatalf("the killed apply left an instance: %s", r.stdout)
	}
	// The other gpu is free; then none is.
	d2.MustCtl("instance", "apply", "-f", writeSpec(t, "name: "+name+"-b\npci_aliases: [{name: gpu}]\n"))
	testenv.CleanupDomain(t, uri, name+"-b")
	r := d2.Ctl("instance", "apply", "-f", writeSpec(t, "name: "+name+"-c\npci_aliases: [{name: gpu}]\n"))
	if r.code == 0 || !strings.Contains(r.stdout+r.stderr, "alias gpu: 1 burned awaiting cleaning, 1 in use") {
		t.Fatalf("third apply: %s", r)
	}
	d2.MustCtl("instance", "delete", name+"-b")
}
