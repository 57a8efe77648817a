// Package guestvm is the end-to-end test of vmeta-agent in a real booted
// Linux guest: a libvirt domain under TCG (hostctl/virt builds and defines
// it) with tagged virtio and SCSI disks, an encrypted one, two tagged NICs
// and a virtiofs share served by virtiofsd, booting Debian's kernel with an
// initramfs of busybox, systemd-udevd/udevadm, iproute2's ip, findmnt and
// the static agent. The config drive is built with vmeta's configdrive
// package from metadata that describes the addresses libvirt assigned,
// read back from the domain XML. The guest runs the agent and prints what
// udev, the links, the interfaces and the mount table say; the test checks
// each against the device tagging specification, then hot-plugs a tagged
// disk, swaps the config drive's medium and waits for the new link.
//
// Prerequisites come from test/setup (libvirtd, the guest kernel,
// busybox-static, udev); a missing one skips the test with the reason, or
// fails it under VMETA_REQUIRE_INTEGRATION=1.
package guestvm
