// Package guest will hold vmeta-agent, the tool installed in guest images
// that turns device metadata into udev tags, /dev/disk/by-tag/ links, NIC
// alternative names and virtiofs mounts. It is not written yet (it has its
// own issue); the folder exists so the layout test can keep it free of host
// code from the start: it may import schema/, configdrive/ and
// internal/metadata only.
package guest
