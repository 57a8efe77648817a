// Package nfsguest proves hostctl's NFS share mounts against a real NFS
// server with a real NFS client.
//
// The machines CI runs on have no NFS client: their kernel lists no nfs
// in /proc/filesystems and cannot load modules (there is no
// /lib/modules), so `mount -t nfs4 127.0.0.1:/export DIR` answers
// "mount.nfs4: No such device"; Debian 12 packages no FUSE NFS client
// (libnfs-utils has nfs-cp and nfs-ls, no mount). hostctl/shares's
// TestNFSRealMount checks that failure path on the host. Here the client
// is Debian's kernel inside a guest: the test boots (QEMU, TCG) the
// kernel of test/debianvm's Debian 12 tree with an initramfs of busybox,
// that kernel's NFS modules, util-linux's mount and nfs-common's
// mount.nfs (the host's own binaries) and mountcheck, a static program
// that runs hostctl's own mount code — hostctl/shares.Mounts with the
// real ExecRunner, as `hostctl serve` does — against NFS-Ganesha on the
// host.
//
// Ganesha and QEMU share a private network namespace: the guest's
// user-mode network reaches the host's loopback at 10.0.2.2, where this
// test's Ganesha listens on 2049, the port NFSv4 mounts use, without
// taking that port from the machine (another test's Ganesha may hold it)
// and without a bridge or firewall rule.
package nfsguest
