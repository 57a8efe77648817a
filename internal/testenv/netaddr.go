//go:build unix

package testenv

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Shares of libvirt's default network (192.168.122.0/24) for fixed DHCP
// leases. Test packages run in parallel against one libvirtd, each with its
// own store, so no two packages may draw from one range: each takes its own.
const (
	AddrsController = 10  // hostctl/controller: .10-.39
	AddrsE2E        = 40  // test/e2e: .40-.99
	AddrsVirt       = 100 // hostctl/virt: .100-.199
	AddrsDebianVM   = 200 // test/debianvm: .200-.249
	AddrsNICs       = 250 // hostctl/parts/nics: .250-.254
)

// addrRangeLen is how many addresses each share has, by its first one.
var addrRangeLen = map[int]int{
	AddrsController: 30,
	AddrsE2E:        60,
	AddrsVirt:       100,
	AddrsDebianVM:   50,
	AddrsNICs:       5,
}

var (
	addrMu   sync.Mutex
	addrHeld = map[string]bool{}
)

// DefaultNetworkAddress returns an address of libvirt's default network
// from the share that starts at first (one of the Addrs constants) that the
// network has no host entry for — live or in its definition, whoever left
// it there (a killed run leaves entries behind) —, that its DHCP server has
// not leased to anyone, and that no other test of this process holds. The
// hold ends with t.
//
// The lease matters: dnsmasq does not give a host its configured address
// while a lease of that address to another MAC has not expired (an hour
// after a guest of an earlier test, or an earlier run, last renewed it);
// it hands out a dynamic address instead, and the guest is not where its
// metadata says.
func DefaultNetworkAddress(t testing.TB, uri string, first int) string {
	t.Helper()
	n, ok := addrRangeLen[first]
	if !ok {
		t.Fatalf("DefaultNetworkAddress: %d starts no share of the default network", first)
	}
	addrMu.Lock()
	defer addrMu.Unlock()
	var xml strings.Builder
	for _, args := range [][]string{{"net-dumpxml", "default"}, {"net-dumpxml", "default", "--inactive"}, {"net-dhcp-leases", "default"}} {
		out, err := exec.Command("virsh", append([]string{"-q", "-c", uri}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("virsh %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		xml.Write(out)
	}
	start := rand.IntN(n)
	for i := range n {
		ip := fmt.Sprintf("192.168.122.%d", first+(start+i)%n)
		if addrHeld[ip] || strings.Contains(xml.String(), "ip='"+ip+"'") || strings.Contains(xml.String(), " "+ip+"/") {
			continue
		}
		addrHeld[ip] = true
		t.Cleanup(func() {
			addrMu.Lock()
			defer addrMu.Unlock()
			delete(addrHeld, ip)
		})
		return ip
	}
	t.Fatalf("no free address in 192.168.122.%d-%d on the default network:\n%s", first, first+n-1, xml.String())
	return ""
}
