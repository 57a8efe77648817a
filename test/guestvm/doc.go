// Package guestvm is the end-to-end test of vmeta-agent in a real booted
// Linux guest, with hostctl as the compute agent: the test starts
// `hostctl serve --virt libvirt` (TCG, booting Debian's kernel with an
// initramfs of busybox, systemd-udevd/udevadm, iproute2's ip, findmnt and
// the static agent) and drives it with its CLI only. `hostctl instance
// apply` creates the disks (two tagged virtio disks, one encrypted — a LUKS disk —, two
// tagged SCSI disks, a tagged SATA disk), defines the domain with two
// tagged NICs and a virtiofs share, reads back the addresses libvirt
// assigned and builds the config drive from them; `hostctl instance start`
// boots it. The guest runs the agent and prints what udev, the links, the
// interfaces and the mount table say; the test checks each against the
// device tagging specification, and that the agent matched every device
// by the address hostctl published.
//
// Then `hostctl instance attach-disk --tag hotplugged` hot-plugs a disk
// into the running guest: hostctl republishes and swaps the config drive
// cdrom's medium for the rebuilt drive, the agent (run mode) sees the
// media change, and /dev/disk/by-tag/hotplugged appears.
//
// What an instance spec cannot express — Nova's 36-character volume
// serial (QEMU shows a virtio guest 20 bytes), a second tag containing
// '/', an entry of an unknown type, a share the host does not attach — is
// checked last, in the same guest: the test derives a drive from hostctl's
// with those additions, drops it into the virtiofs share, and the guest
// applies it once with `vmeta-agent apply --config-drive`.
//
// TestEncryptedDisksInBootedGuest (encryption_test.go) is the acceptance
// test of ephemeral storage encryption: hostctl (store on Redis) creates
// two LUKS disks and a plain one, the booted guest writes a known pattern,
// and the host checks the files (no plaintext in the LUKS one), each
// disk's passphrase (its own opens it, the other's does not, Redis holds
// neither), and that the guest, the config drive and the metadata service
// say "encrypted" for exactly the LUKS disks.
//
// TestFirmwareInBootedGuest is the firmware transport end to end:
// `hostctl serve --firmware-metadata on` hands the devices document, the
// uuid and the metadata revision to the domain's fw_cfg; a guest with no
// config drive and no NIC loads qemu_fw_cfg through the agent and applies
// the tags from the firmware, reading byte for byte what the host wrote;
// with a drive of the same revision the firmware is preferred, broken
// firmware entries fall back to the drive, and a re-tag of the running
// instance (a newer revision on the drive's new medium) wins over the
// firmware, fixed until the next boot. It also times agent start to tags
// applied from each transport in the same guest.
//
// Prerequisites come from test/setup (libvirtd, the guest kernel and its
// qemu_fw_cfg module, busybox-static, udev); a missing one skips the test
// with the reason, or fails it under VMETA_REQUIRE_INTEGRATION=1. The kernel's base
// initramfs is cached in testenv.GuestImageCacheDir between runs.
package guestvm
