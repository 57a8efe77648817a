package devices

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/vmeta/vmeta/internal/testenv"
)

// fixtureDevice is one PCI function of a fixture sysfs tree, as the
// kernel lays it out: /sys/devices/pci<domain>:<bus>/<addr>/{vendor,
// device,class} and the link /sys/bus/pci/devices/<addr> to it; a VF has
// a physfn link to its PF, a PF sriov_totalvfs.
type fixtureDevice struct {
	addr, vendor, device, class string
	totalVFs                    int    // > 0: an SR-IOV PF
	physfn                      string // the PF of a VF
}

// thisMachine is the PCI layout of the CI machine (a QEMU q35 guest),
// copied from its /sys/bus/pci/devices.
var thisMachine = []fixtureDevice{
	{addr: "0000:00:00.0", vendor: "0x8086", device: "0x0d57", class: "0x060000"},
	{addr: "0000:00:01.0", vendor: "0x1af4", device: "0x1045", class: "0xffff00"},
	{addr: "0000:00:02.0", vendor: "0x1af4", device: "0x1042", class: "0x018000"},
	{addr: "0000:00:03.0", vendor: "0x1af4", device: "0x1041", class: "0x020000"},
	{addr: "0000:00:04.0", vendor: "0x1af4", device: "0x1053", class: "0xffff00"},
	{addr: "0000:00:05.0", vendor: "0x1af4", device: "0x1044", class: "0xffff00"},
}

// gpuServer is a passthrough host as lspci -nn shows such machines: a root
// port, two NVIDIA A100s, two Samsung PM9A3 NVMe drives, and a Mellanox
// ConnectX-6 Dx PF with two VFs.
var gpuServer = []fixtureDevice{
	{addr: "0000:00:01.0", vendor: "0x8086", device: "0x347a", class: "0x060400"},
	{addr: "0000:3b:00.0", vendor: "0x10de", device: "0x20b5", class: "0x030200"},
	{addr: "0000:3c:00.0", vendor: "0x10de", device: "0x20b5", class: "0x030200"},
	{addr: "0000:5e:00.0", vendor: "0x144d", device: "0xa80a", class: "0x010802"},
	{addr: "0000:5f:00.0", vendor: "0x144d", device: "0xa80a", class: "0x010802"},
	{addr: "0000:af:00.0", vendor: "0x15b3", device: "0x101d", class: "0x020000", totalVFs: 8},
	{addr: "0000:af:00.2", vendor: "0x15b3", device: "0x101e", class: "0x020000", physfn: "0000:af:00.0"},
	{addr: "0000:af:00.3", vendor: "0x15b3", device: "0x101e", class: "0x020000", physfn: "0000:af:00.0"},
}

// pool returns n one-time-use GPUs 0000:NN:00.0 (NN from 0x10).
func pool(n int) []fixtureDevice {
	var out []fixtureDevice
	for i := range n {
		out = append(out, fixtureDevice{addr: fmt.Sprintf("0000:%02x:00.0", 0x10+i), vendor: "0x10de", device: "0x20b5", class: "0x030200"})
	}
	return out
}

func writeSysfs(t testing.TB, devs []fixtureDevice) string {
	t.Helper()
	root := t.TempDir()
	bus := filepath.Join(root, "bus", "pci", "devices")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(bus, 0o755))
	for _, d := range devs {
		parent := "pci" + d.addr[:7]
		dir := filepath.Join(root, "devices", parent, d.addr)
		must(os.MkdirAll(dir, 0o755))
		for name, v := range map[string]string{"vendor": d.vendor, "device": d.device, "class": d.class} {
			must(os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o444))
		}
		if d.totalVFs > 0 {
			must(os.WriteFile(filepath.Join(dir, "sriov_totalvfs"), []byte(fmt.Sprintf("%d\n", d.totalVFs)), 0o444))
		}
		if d.physfn != "" {
			must(os.Symlink("../"+d.physfn, filepath.Join(dir, "physfn")))
		}
		must(os.Symlink(filepath.Join("..", "..", "..", "devices", parent, d.addr), filepath.Join(bus, d.addr)))
	}
	return root
}

func testenvRedisServer(t testing.TB) *testenv.RedisServer { return testenv.StartRedisServer(t) }
