// Package virt is hostctl's libvirt adapter: it turns an instance spec into
// libvirt domain XML (q35, virtio/SCSI/SATA disks with serials, a SATA cdrom
// for the config drive, virtio NICs on libvirt networks, virtiofs shares,
// the SMBIOS identity cloud-init looks for, a serial console logged to a
// file), drives domains and networks through go-libvirt over the libvirtd
// socket (Conn: define, start, stop, hot-plug, config drive media changes,
// DHCP host entries and the DHCP server's leases (leases.go), lifecycle
// and device events, reconnecting when libvirtd restarts), and reads the
// addresses the hypervisor chose back out of the domain XML, in the form
// the device-role-tagging metadata reports them.
//
// Everything a caller must check before touching libvirt — instance names,
// buses the machine type has, serial lengths, image paths inside the data
// directory — is in validate.go; BuildDomain runs those checks itself and
// refuses an instance with a clear error naming the spec field.
//
// Devices carry libvirt user aliases ("ua-disk-vdb", "ua-nic-525400aabbcc"
// or "ua-nic-1" for a NIC defined without a MAC, "ua-fs-TAG",
// "ua-config-drive"), which libvirt keeps in both the inactive and the live
// XML, passes to QEMU as device ids and reports in device events, so an
// event or a read-back maps to the spec device it came from (ParseAlias).
//
// How each address relates to what a Linux guest sees — verified by
// booting one (guest_test.go) — is described at the top of addresses.go.
package virt
