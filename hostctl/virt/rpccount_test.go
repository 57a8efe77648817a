package virt

import (
	"encoding/binary"
	"fmt"
	"net"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/testenv"
)

// discardConn is a net.Conn whose writes all succeed.
type discardConn struct{ net.Conn }

func (discardConn) Write(b []byte) (int, error) { return len(b), nil }

// TestCountingConn: the packets of libvirt's protocol are counted
// however the bytes are cut into writes — one write per packet, a packet
// in pieces (its length too), several packets in one write.
func TestCountingConn(t *testing.T) {
	pkt := func(body int) []byte {
		b := make([]byte, 4+body)
		binary.BigEndian.PutUint32(b, uint32(4+body))
		for i := 4; i < len(b); i++ {
			b[i] = 0xff // a body that would read as a huge length
		}
		return b
	}
	var stream []byte
	for _, n := range []int{24, 100, 24, 70000, 28} {
		stream = append(stream, pkt(n)...)
	}
	for _, cut := range []int{1, 2, 3, 5, 7, 24, 4096, len(stream)} {
		var n atomic.Int64
		c := &countingConn{Conn: discardConn{}, n: &n}
		for b := stream; len(b) > 0; {
			k := min(cut, len(b))
			if _, err := c.Write(b[:k]); err != nil {
				t.Fatal(err)
			}
			b = b[k:]
		}
		if got := n.Load(); got != 5 {
			t.Errorf("writes of %d bytes: %d packets counted, want 5", cut, got)
		}
	}
}

// TestConnRPCs: a Conn over libvirtd's socket counts one packet per call.
func TestConnRPCs(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	c := connect(t, uri, ConnOptions{})
	ctx := testCtx(t, 30*time.Second)
	before, all := c.RPCs(), RPCs()
	for range 3 {
		if _, err := c.Version(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.RPCs() - before; got != 3 {
		t.Errorf("3 version calls: %d packets counted, want 3", got)
	}
	if got := RPCs() - all; got < 3 {
		t.Errorf("the process counted %d packets for 3 calls", got)
	}
}

// TestNetworkUpdateAsksOrderOnce: a Conn asks libvirtd once per
// connection which argument order its NetworkUpdate takes (go-libvirt's
// NetworkUpdateCompat asks on every update): adding a fixed lease to the
// persistent definition costs four calls the first time (look up, read
// the definition, ask, update), three after; the leases are there and go
// again.
func TestNetworkUpdateAsksOrderOnce(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	ctx := testCtx(t, time.Minute)
	c := connect(t, uri, ConnOptions{})
	const network = "default"
	var hosts []DHCPHost
	for range 2 {
		mac, err := GenerateMAC()
		if err != nil {
			t.Fatal(err)
		}
		h := DHCPHost{MAC: mac, IP: testenv.DefaultNetworkAddress(t, uri, testenv.AddrsVirt)}
		t.Cleanup(func() {
			_ = exec.Command("virsh", "-q", "-c", uri, "net-update", network, "delete", "ip-dhcp-host",
				fmt.Sprintf("<host mac='%s'/>", mac), "--config").Run()
		})
		hosts = append(hosts, h)
	}
	for i, h := range hosts {
		before := c.RPCs()
		if err := c.AddDHCPHostConfig(ctx, network, h); err != nil {
			t.Fatalf("AddDHCPHostConfig: %v", err)
		}
		if got, want := c.RPCs()-before, int64(4-i); got != want {
			t.Errorf("update %d: %d calls, want %d", i+1, got, want)
		}
	}
	got, err := c.DHCPHosts(ctx, network)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		if countHost(got, h.MAC) != 1 {
			t.Errorf("the definition lacks %s -> %s: %v", h.MAC, h.IP, got)
		}
		if err := c.RemoveDHCPHost(ctx, network, h.MAC); err != nil {
			t.Errorf("RemoveDHCPHost: %v", err)
		}
	}
	if got, err := c.DHCPHosts(ctx, network); err != nil || countHost(got, hosts[0].MAC)+countHost(got, hosts[1].MAC) != 0 {
		t.Errorf("after removal: %v, %v", got, err)
	}
}
