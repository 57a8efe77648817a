package migrate_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

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

type evacDevice struct {
	Host          string `json:"host"`
	Address       string `json:"address"`
	Reserved      int    `json:"reserved"`
	Used          int    `json:"used"`
	ConsumerName  string `json:"consumer_name"`
	NeedsCleaning bool   `json:"needs_cleaning"`
}

// evacDevices is `device list --all-hosts`, logged as the issue asks,
// by host.
func evacDevices(t *testing.T, h *host, when string) map[string]evacDevice {
	t.Helper()
	var l struct {
		Devices []evacDevice `json:"devices"`
	}
	if err := json.Unmarshal([]byte(h.must("device", "list", "--all-hosts", "--output", "json").stdout), &l); err != nil {
		t.Fatal(err)
	}
	out := map[string]evacDevice{}
	for _, d := range l.Devices {
		out[d.Host] = d
	}
	t.Logf("%s: hostctl device list --all-hosts:\n%s", when, h.must("device", "list", "--all-hosts").stdout)
	return out
}

func TestEvacuateRealDeviceBurn(t *testing.T) {
	t.Parallel()
	uriA := testenv.RequireLibvirt(t)
	uriB := testenv.SecondLibvirtd(t)
	redis := testenv.StartRedis(t)
	spec := filepath.Join(t.TempDir(), "devices.yaml")
	if err := os.WriteFile(spec, []byte("devices:\n  - vendor_id: \"10de\"\n    alias: gpu\n    one_time_use: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := newHost(t, "a", uriA, redis, "--device-spec", spec, "--sysfs-root", gpuSysfs(t))
	b := newHost(t, "b", uriB, redis, "--device-spec", spec, "--sysfs-root", gpuSysfs(t))
	name := "evd-" + strconv.Itoa(os.Getpid())
	p := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(p, []byte("name: "+name+"\ndisks: [{name: vda, size: 8M}]\npci_aliases: [{name: gpu}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.must("instance", "apply", "-f", p)
	if d := evacDevices(t, a, "applied on a")["a"]; d.Used != 1 || d.Reserved != 1 || d.ConsumerName != name {
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
	ds := evacDevices(t, b, "evacuated to b, a down")
	if d := ds["b"]; d.Used != 1 || d.Reserved != 1 || d.ConsumerName != name {
		t.Fatalf("b's GPU after the evacuation: %+v, want a new device used and burned by %s", d, name)
	}
	if d := ds["a"]; d.Used != 1 || d.Reserved != 1 {
		t.Fatalf("a's GPU while a is down: %+v, want still held and burned", d)
	}

	a.restart()
	ds = evacDevices(t, a, "a came back")
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
	if d := evacDevices(t, b, "deleted on b")["b"]; d.Used != 0 || !d.NeedsCleaning {
		t.Fatalf("b's GPU after the delete: %+v, want burned, needing cleaning", d)
	}
}
