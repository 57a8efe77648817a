// Package guest is vmeta-agent, the tool installed in guest images that
// turns the device role tags of the instance metadata into things Linux
// applications can ask for: udev properties (VMETA_TAGS,
// VMETA_ENCRYPTED), /dev/disk/by-tag/<tag> links, alternative interface
// names, and mounted virtiofs shares, so that an application uses "the
// disk tagged oracledb" instead of parsing bus addresses (the "simple
// tool" the virt-device-tagged-attach-detach specification asks for).
//
// One pass (Agent.Apply, `vmeta-agent apply`):
//
//  1. read openstack/latest/meta_data.json from a config drive found by
//     its label, without mounting it, else from the metadata service
//     (package source); an unreadable or invalid document changes
//     nothing;
//  2. read the devices from sysfs (package sysfs) and match each entry of
//     the devices list to exactly one of them, or report why not
//     (package match);
//  3. write one rules file to /run/udev/rules.d/ atomically, reload udev
//     if it changed, trigger only the devices whose udev record differs
//     from what the rules say, wait for those events only (not a global
//     settle), and check udev's records again
//     (package udev);
//  4. add one alternative name per tag to each tagged NIC (package
//     altname), and remove the ones it added that are no longer wanted;
//  5. mount each share at <root>/<tag> unless the tag is mounted already,
//     and unmount the shares it mounted that the metadata dropped
//     (package shares);
//  6. record what it did in /run/vmeta-agent/state.json, which
//     `vmeta-agent status` prints.
//
// A pass that finds everything in place changes nothing: the rules file
// is only written when its content differs, and only devices whose udev
// record differs are triggered. Agent.Run (`vmeta-agent run`) repeats
// the pass on kernel device events (package uevent) and metadata changes.
//
// The agent is a small static binary that starts fast (it holds boot):
// it validates with schema/check (generated from the schema files; no
// JSON Schema library), reads drives with configdrive/driveread, takes
// the metadata's types from internal/metadata/wire, asks the metadata
// service with its own HTTP/1.1 client (no net/http), compiles no
// regular expression at start, and imports none of vmeta's host code;
// test/layout enforces the imports, and vmeta-agent's TestStartInitCost
// bounds what its package initialisers allocate.
package guest
