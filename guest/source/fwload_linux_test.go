package source

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestModuleDep: the module's line of modules.dep, whatever its
// compression, '-' and '_' alike; deps as listed; nothing for a name that
// is only a prefix of another.
func TestModuleDep(t *testing.T) {
	dep := `kernel/drivers/firmware/edd.ko:
kernel/drivers/firmware/qemu_fw_cfg_extra.ko:
kernel/drivers/firmware/qemu_fw_cfg.ko:
kernel/fs/fuse/virtiofs.ko.xz: kernel/fs/fuse/fuse.ko.xz
kernel/drivers/net/virtio-net.ko.zst: kernel/net/core/failover.ko.zst kernel/drivers/net/net_failover.ko.zst
`
	for _, c := range []struct {
		name, path string
		deps       []string
		found      bool
	}{
		{"qemu_fw_cfg", "kernel/drivers/firmware/qemu_fw_cfg.ko", nil, true},
		{"virtiofs", "kernel/fs/fuse/virtiofs.ko.xz", []string{"kernel/fs/fuse/fuse.ko.xz"}, true},
		{"virtio_net", "kernel/drivers/net/virtio-net.ko.zst", []string{"kernel/net/core/failover.ko.zst", "kernel/drivers/net/net_failover.ko.zst"}, true},
		{"qemu_fw", "", nil, false},
		{"absent", "", nil, false},
	} {
		p, deps, found := moduleDep(strings.NewReader(dep), c.name)
		if p != c.path || strings.Join(deps, " ") != strings.Join(c.deps, " ") || found != c.found {
			t.Errorf("moduleDep(%q) = %q %q %v, want %q %q %v", c.name, p, deps, found, c.path, c.deps, c.found)
		}
	}
}

// TestModprobeConfigures: options, install commands and soft dependencies
// for the module (in a *.conf file of a modprobe.d directory, or as a
// kernel parameter) send the load through modprobe; a blacklist, another
// module's options and other files do not.
func TestModprobeConfigures(t *testing.T) {
	write := func(t *testing.T, dir, name, text string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		what, file, text, cmdline string
		want                      bool
	}{
		{"nothing", "", "", "root=/dev/vda rw console=ttyS0", false},
		{"blacklist", "fw.conf", "# keep udev from loading it\nblacklist qemu_fw_cfg\n", "", false},
		{"another module's options", "x.conf", "options loop max_loop=8\ninstall qemu_fw_cfg_extra /bin/true\n", "", false},
		{"not a .conf file", "fw.conf.dpkg-old", "options qemu_fw_cfg ioport=0x510\n", "", false},
		{"options", "fw.conf", "options qemu_fw_cfg ioport=0x510\n", "", true},
		{"options, dashes", "fw.conf", "options qemu-fw-cfg ioport=0x510\n", "", true},
		{"install", "fw.conf", "install qemu_fw_cfg /bin/false\n", "", true},
		{"softdep", "fw.conf", "softdep qemu_fw_cfg pre: something\n", "", true},
		{"kernel parameter", "", "", "root=/dev/vda qemu_fw_cfg.ioport=0x510", true},
		{"kernel parameter of another module", "", "", "root=/dev/vda loop.max_loop=8 qemu_fw_cfg", false},
	} {
		t.Run(c.what, func(t *testing.T) {
			d1, d2 := filepath.Join(t.TempDir(), "etc"), filepath.Join(t.TempDir(), "absent")
			write(t, d1, "other.conf", "options snd index=0\n")
			if c.file != "" {
				write(t, d1, c.file, c.text)
			}
			if got := modprobeConfigures([]string{d2, d1}, c.cmdline, "qemu_fw_cfg"); got != c.want {
				t.Errorf("modprobeConfigures = %v, want %v", got, c.want)
			}
		})
	}
}
