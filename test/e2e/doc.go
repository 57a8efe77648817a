// Package e2e holds vmeta's end-to-end tests. They build the real hostctl
// binary once, run `hostctl serve` as a separate process on a private data
// directory, admin socket and loopback port, drive it through the real CLI,
// and read what it publishes with the real consumers: Debian's cloud-init
// (ConfigDriveReader on unpacked config drives, MetadataReader against the
// metadata service), xorriso, isoinfo and mtools.
//
// Prerequisites are installed by test/setup. Missing ones skip a test with
// the reason, or fail it under VMETA_REQUIRE_INTEGRATION=1 (internal/testenv).
package e2e
