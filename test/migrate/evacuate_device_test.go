package migrate_test

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/testenv"
)

// The one-time-use burn rules of an evacuation between the two real
// hosts, each with a device inventory read from a sysfs tree laid out as
// the kernel does (one "10de" GPU, one_time_use): the device is not
// real, so QEMU cannot start a domain that passes it through — the
// evacuation rebuilds and defines the instance on b, claims and burns
// b's device, and reports the start's failure (the instance is b's; a
// start retries it). When a comes back its device is released, burned:
// it needs cleaning by an operator.

// gpuSysfs is a sysfs tree with one GPU at 0000:3b:00.0.
func gpuSysfs(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	bus := filepath.Join(root, "bus", "pci", "devices")
	dir := filepath.Join(root, "devices", "pci0000:00", "0000:3b:00.0")
	for _, d := range []string{bus, dir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, v := range map[string]string{"vendor": "0x10de", "device": "0x20b5", "class": "0x030200"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../../../devices/pci0000:00/0000:3b:00.0", filepath.Join(bus, "0000:3b:00.0")); err != nil {
		t.Fatal(err)
	}
	return root
}

// startWith starts h's daemon as host.start does, with extra flags.
func (h *host) startWith(extra ...string) {
	h.t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		h.t.Fatal(err)
	}
	args := append([]string{"serve", "--host", h.name, "--store", h.store, "--data-dir", h.dataDir, "--socket", h.sock,
		"--metadata-listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		"--virt", "libvirt", "--libvirt-uri", h.uri, "--domain-type", "qemu", "--domain-memory", "128",
		"--reconcile-interval", "0", "--heartbeat-interval", "200ms", "--host-down-after", "10s",
		"--migration-listen", h.migAddr, "--luks-iter-time", "10ms"}, extra...)
	cmd := exec.Command(h.bin, args...)
	cmd.Env = testenv.ChildEnv(nil, "VMETA_VIRT=libvirt")
	if h.proc, err = testenv.StartProcess(h.t, "hostctl serve --host "+h.name, cmd); err != nil {
		h.t.Fatal(err)
	}
	if err := h.proc.WaitReady(60*time.Second, 50*time.Millisecond, func() error {
		if r := h.ctl("instance", "list"); r.code != 0 {
			return errors.New(r.String())
		}
		return nil
	}); err != nil {
		h.t.Fatalf("start host %s: %v\n%s", h.name, err, h.proc.Output())
	}
}

// deviceHost is a host with the GPU inventory, not started.
func deviceHost(t *testing.T, name, uri, store string, extra []string) *host {
	dir, err := os.MkdirTemp("", "vmeta-evd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	h := &host{t: t, name: name, uri: uri, store: store, bin: hostctlBin(t), dataDir: filepath.Join(dir, "data"),
		sock: filepath.Join(dir, "s"), migAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	t.Cleanup(func() {
		h.stop()
		if t.Failed() && h.proc != nil {
			t.Logf("hostctl serve --host %s logged:\n%s", name, h.proc.Output())
		}
	})
	h.startWith(extra...)
	return h
}

type device struct {
	Host          string `json:"host"`
	Address       string `json:"address"`
	Reserved      int    `json:"reserved"`
	Used          int    `json:"used"`
	ConsumerName  string `json:"consumer_name"`
	NeedsCleaning bool   `json:"needs_cleaning"`
}

// devices is `device list --all-hosts`, logged as the issue asks, by
// host.
func devices(t *testing.T, h *host, when string) map[string]device {
	t.Helper()
	var l struct {
		Devices []device `json:"devices"`
	}
	if err := json.Unmarshal([]byte(h.must("device", "list", "--all-hosts", "--output", "json").stdout), &l); err != nil {
		t.Fatal(err)
	}
	out := map[string]device{}
	for _, d := range l.Devices {
		out[d.Host] = d
	}
	t.Logf("%s: hostctl device list --all-hosts:\n%s", when, h.must("device", "list", "--all-hosts").stdout)
	return out
}

func TestEvacuateRealDeviceBurn(t *testing.T) {
	builtOnce(t)
	uriA := testenv.RequireLibvirt(t)
	uriB := testenv.SecondLibvirtd(t)
	redis := testenv.StartRedis(t)
	spec := filepath.Join(t.TempDir(), "devices.yaml")
	if err := os.WriteFile(spec, []byte("devices:\n  - vendor_id: \"10de\"\n    alias: gpu\n    one_time_use: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	extraA := []string{"--device-spec", spec, "--sysfs-root", gpuSysfs(t)}
	a := deviceHost(t, "a", uriA, redis, extraA)
	b := deviceHost(t, "b", uriB, redis, []string{"--device-spec", spec, "--sysfs-root", gpuSysfs(t)})
	name := "evd-" + strconv.Itoa(os.Getpid())
	p := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(p, []byte("name: "+name+"\ndisks: [{name: vda, size: 8M}]\npci_aliases: [{name: gpu}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.must("instance", "apply", "-f", p)
	if d := devices(t, a, "applied on a")["a"]; d.Used != 1 || d.Reserved != 1 || d.ConsumerName != name {
		t.Fatalf("a's GPU after the apply: %+v, want used and burned by %s", d, name)
	}

	a.proc.Kill()
	waitDown(t, b, "a")
	r := b.ctl("instance", "evacuate", name, "--to", "b")
	t.Logf("evacuate with a device QEMU cannot open: %s", r)
	if r.code != 0 && !strings.Contains(r.stderr, "its start failed") {
		t.Fatalf("evacuate: %s", r)
	}
	if in := b.show(name); in.Host != "b" {
		t.Fatalf("after the evacuation: %+v", in)
	}
	if s := domstate(t, uriB, name); s == "" {
		t.Fatal("no domain on b after the evacuation")
	}
	ds := devices(t, b, "evacuated to b, a down")
	if d := ds["b"]; d.Used != 1 || d.Reserved != 1 || d.ConsumerName != name {
		t.Fatalf("b's GPU after the evacuation: %+v, want a new device used and burned by %s", d, name)
	}
	if d := ds["a"]; d.Used != 1 || d.Reserved != 1 {
		t.Fatalf("a's GPU while a is down: %+v, want still held and burned", d)
	}

	a.stop()
	a.startWith(extraA...)
	ds = devices(t, a, "a came back")
	if d := ds["a"]; d.Used != 0 || d.Reserved != 1 || !d.NeedsCleaning {
		t.Fatalf("a's GPU after a came back: %+v, want released, burned, needing cleaning", d)
	}
	if d := ds["b"]; d.Used != 1 || d.Reserved != 1 {
		t.Fatalf("b's GPU after a came back: %+v", d)
	}
	if s := domstate(t, uriA, name); s != "" {
		t.Fatalf("a still has the domain: %q", s)
	}
	b.must("instance", "delete", name)
	if d := devices(t, b, "deleted on b")["b"]; d.Used != 0 || !d.NeedsCleaning {
		t.Fatalf("b's GPU after the delete: %+v, want burned, needing cleaning", d)
	}
}
