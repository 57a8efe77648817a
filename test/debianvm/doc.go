// Package debianvm is the end-to-end test through a real Debian 12 guest:
// systemd, udev and Debian's stock cloud-init 22.4.2, with vmeta-agent
// installed from its .deb (internal/pkgbuild) by `dpkg -i`, as an operator
// would build an image.
//
// build-image (run by test/setup for the mmdebstrap layer) makes the image
// without loop mounts and caches it outside the clone by the hash of its
// inputs; the test starts `hostctl serve --virt libvirt` (TCG) booting the
// image's own kernel and initrd and proves every transport of the
// metadata and every part of an instance in three boots, reading back
// from the serial console what the guest's cloud-init and vmeta-agent did
// (test/debianvm/image/vmeta-report):
//
//   - config drive only (--firmware-metadata off): a tagged data disk, a
//     LUKS disk hostctl created and verified (VMETA_ENCRYPTED=1 in udev on
//     that disk only), a tagged NIC with a static address, SSH keys, user
//     data, and a share from the registry (`hostctl share create`, `share
//     attach`) mounted and read; then `hostctl instance attach-disk --tag
//     late` makes /dev/disk/by-tag/late appear and a unit bound to its
//     device unit starts;
//   - metadata service only (config_drive: false), side by side with the
//     first: after `hostctl network setup-metadata` (DNAT on virbr0 to the
//     daemon's metadata listener on the bridge address) cloud-init's
//     OpenStack datasource and the agent's HTTP source read
//     http://169.254.169.254 and the guest gets the same hostname, keys,
//     network and devices;
//   - firmware: the first instance stopped, its share detached (`share
//     detach`), the daemon restarted with --firmware-metadata on, started
//     again: the agent loads qemu_fw_cfg itself under its unit's
//     CAP_SYS_MODULE (the image keeps udev from loading it) and applies the
//     fw_cfg entries first; the encrypted disk is still the only one
//     marked; the share is gone.
//
// Each boot prints how long the agent's unit held the boot
// (ActiveEnterTimestampMonotonic - InactiveExitTimestampMonotonic of
// vmeta-agent.service: its start to READY=1), the time from its process's
// start to its first log line (since_start), its debug journal (each phase
// of the first pass) and the critical chain of local-fs-pre.target.
// These are figures to read, never asserted: TCG on a shared machine
// varies several-fold with the host's load.
//
// Prerequisites come from test/setup (libvirtd, mmdebstrap, the base
// tree); a missing one skips the test with the reason, or fails it under
// VMETA_REQUIRE_INTEGRATION=1.
package debianvm
