// Package debianvm is the end-to-end test through a real Debian 12 guest:
// systemd, udev and Debian's stock cloud-init 22.4.2, with vmeta-agent
// installed from its .deb (internal/pkgbuild) by `dpkg -i`, as an operator
// would build an image.
//
// build-image (run by test/setup for the debootstrap layer) makes the image
// without loop mounts and caches it outside the clone by the hash of its
// inputs; the test starts `hostctl serve --virt libvirt` (TCG) booting the
// image's own kernel and initrd, applies an instance with a tagged data
// disk, a tagged NIC with a static address, a virtiofs share, SSH keys and
// user data, and reads back from the serial console what the guest's
// cloud-init and vmeta-agent did (test/debianvm/image/vmeta-report). Then
// `hostctl instance attach-disk --tag late` makes /dev/disk/by-tag/late
// appear, and a unit bound to its device unit starts. A second boot of the
// same image has no config drive (config_drive: false): after `hostctl
// network setup-metadata` (DNAT on virbr0 to the daemon's metadata
// listener on the bridge address), cloud-init's OpenStack datasource and
// the agent's HTTP source read http://169.254.169.254 and the guest gets
// the same hostname, keys, network and devices.
//
// Prerequisites come from test/setup (libvirtd, debootstrap, the base
// tree); a missing one skips the test with the reason, or fails it under
// VMETA_REQUIRE_INTEGRATION=1.
package debianvm
