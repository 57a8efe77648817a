//go:build unix

package testenv

import (
	"testing"

	libvirt "github.com/digitalocean/go-libvirt"
)

// TestRemoveDomain: removing a domain succeeds whatever state it is in
// when the removal acts, with no look at the state first: defined but not
// running (what a guest that powered itself off leaves, the case destroy
// answers "domain is not running"), already gone, and never there.
func TestRemoveDomain(t *testing.T) {
	uri := RequireLibvirt(t)
	name := UniqueDomainName(t)
	CleanupDomain(t, uri, name) // in case the test fails half-way
	l, err := connectLibvirt(uri)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Disconnect()
	xml := "<domain type='qemu'><name>" + name + "</name><memory unit='MiB'>64</memory>" +
		"<os><type arch='x86_64' machine='q35'>hvm</type></os></domain>"
	if _, err := l.DomainDefineXML(xml); err != nil {
		t.Fatalf("define %s: %v", name, err)
	}
	if err := removeDomain(uri, name); err != nil {
		t.Fatalf("remove a defined domain that is not running: %v", err)
	}
	if _, err := l.DomainLookupByName(name); !libvirt.IsNotFound(err) {
		t.Fatalf("domain %s still there after removal (lookup: %v)", name, err)
	}
	if err := removeDomain(uri, name); err != nil {
		t.Errorf("remove a domain already removed: %v", err)
	}
}
