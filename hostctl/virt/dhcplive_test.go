package virt

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/testenv"
)

// TestDHCPHostConfigAndSyncLive (real libvirtd): AddDHCPHostConfig writes
// the lease to the persistent definition only (`virsh net-dumpxml
// --inactive` has it, the running network not: no firewall reload, no
// dnsmasq restart); SyncLiveDHCPHosts brings it live with one update, and
// a second sync makes none; RemoveDHCPHost takes it out of both, and out
// of the definition alone when it never went live.
func TestDHCPHostConfigAndSyncLive(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	ctx := testCtx(t, time.Minute)
	c := connect(t, uri, ConnOptions{})
	const network = "default"
	if out := virsh(t, uri, "net-info", network); !strings.Contains(out, "Active:         yes") {
		t.Skipf("network %s does not run:\n%s", network, out)
	}
	var hs []DHCPHost
	for range 2 {
		mac, err := GenerateMAC()
		if err != nil {
			t.Fatal(err)
		}
		ip := testenv.DefaultNetworkAddress(t, uri, testenv.AddrsVirt)
		hs = append(hs, DHCPHost{MAC: mac, IP: ip})
		t.Cleanup(func() { // also after a failure
			for _, scope := range []string{"--live", "--config"} {
				_ = exec.Command("virsh", "-q", "-c", uri, "net-update", network, "delete", "ip-dhcp-host",
					fmt.Sprintf("<host mac='%s'/>", mac), scope).Run()
			}
		})
	}
	has := func(live bool, h DHCPHost) bool {
		args := []string{"net-dumpxml", network}
		if !live {
			args = append(args, "--inactive")
		}
		return strings.Contains(virsh(t, uri, args...), fmt.Sprintf("<host mac='%s' ip='%s'/>", h.MAC, h.IP))
	}

	start := time.Now()
	for _, h := range hs {
		if err := c.AddDHCPHostConfig(ctx, network, h); err != nil {
			t.Fatalf("AddDHCPHostConfig: %v", err)
		}
	}
	t.Logf("2 leases to the persistent definition: %s", time.Since(start))
	for _, h := range hs {
		if !has(false, h) || has(true, h) {
			t.Errorf("%v: persistent %t, live %t; want only persistent", h, has(false, h), has(true, h))
		}
	}
	start = time.Now()
	n, err := c.SyncLiveDHCPHosts(ctx, network, []string{hs[0].MAC})
	if err != nil || n != 1 {
		t.Fatalf("SyncLiveDHCPHosts: %d updates, %v; want 1", n, err)
	}
	t.Logf("1 lease live: %s", time.Since(start))
	if !has(true, hs[0]) || has(true, hs[1]) {
		t.Errorf("live: %v %t, %v %t; want only the first", hs[0], has(true, hs[0]), hs[1], has(true, hs[1]))
	}
	if n, err := c.SyncLiveDHCPHosts(ctx, network, []string{hs[0].MAC}); err != nil || n != 0 {
		t.Errorf("second sync: %d updates, %v; want 0", n, err)
	}
	// The undo of a failed start: off the running network, still defined;
	// a lease that is not live is left alone.
	if err := c.RemoveLiveDHCPHost(ctx, network, hs[0].MAC); err != nil {
		t.Fatalf("RemoveLiveDHCPHost: %v", err)
	}
	if err := c.RemoveLiveDHCPHost(ctx, network, hs[1].MAC); err != nil {
		t.Fatalf("RemoveLiveDHCPHost of a lease not live: %v", err)
	}
	for _, h := range hs {
		if !has(false, h) || has(true, h) {
			t.Errorf("after RemoveLiveDHCPHost %v: persistent %t, live %t; want only persistent", h, has(false, h), has(true, h))
		}
	}
	for _, h := range hs {
		if err := c.RemoveDHCPHost(ctx, network, h.MAC); err != nil {
			t.Fatalf("RemoveDHCPHost %v: %v", h, err)
		}
		if has(false, h) || has(true, h) {
			t.Errorf("%v still on the network", h)
		}
	}
}
