package virt

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildDomainEncryptedBacking: an encrypted overlay of an encrypted
// image names its backing file in an explicit <backingStore> (ending the
// chain) with its own <encryption> and secret; a backing file outside the
// data directory, not qcow2 or without a secret is refused, naming the
// disk.
func TestBuildDomainEncryptedBacking(t *testing.T) {
	host := func(b *BackingSource) Host {
		h := fixtureHost()
		h.Disks["vda"] = DiskSource{Path: "instances/web1/vda.qcow2", SecretUUID: "11111111-2222-4333-8444-555555555555", Backing: b}
		return h
	}
	ok := &BackingSource{Path: goldenDataDir + "/images/enc.qcow2", Format: "qcow2", SecretUUID: "66666666-7777-4888-9999-000000000000"}
	got, err := BuildDomain(fixtureInstance(), host(ok), Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, filepath.Join("testdata", "web1-backing.xml"), got)
	for _, tc := range []struct {
		name string
		b    *BackingSource
		want string
	}{
		{"outside the data directory", &BackingSource{Path: "/etc/enc.qcow2", SecretUUID: ok.SecretUUID}, "disks[0] backing image"},
		{"raw", &BackingSource{Path: ok.Path, Format: "raw", SecretUUID: ok.SecretUUID}, `format "raw"`},
		{"no secret", &BackingSource{Path: ok.Path}, `secret ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := BuildDomain(fixtureInstance(), host(tc.b), Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("BuildDomain = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}
