package nics

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/events"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/testenv"
)

// TestDHCPLeasesAgainstLibvirt (the part over a real *virt.Conn, the
// default network's dnsmasq and a real DHCP client): a dynamic client
// holds the address an instance's NIC is fixed to; the instance's start
// goes on and reports the holder (log and event). Deleting the instance
// leaves the other MAC's lease alone (the release names the instance's
// MAC). An instance whose NIC has the holder's MAC starts without a
// report, and its delete ends the DHCP server's lease of the address.
func TestDHCPLeasesAgainstLibvirt(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	testenv.LookPath(t, virt.DHCPReleaseTool) // test/setup installs dnsmasq-utils
	bridge := testenv.DefaultNetworkBridge(t, uri)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn, err := virt.Connect(ctx, uri, virt.ConnOptions{})
	if err != nil {
		t.Fatalf("Connect(%s): %v", uri, err)
	}
	defer conn.Close()
	const network = "default"

	ip := testenv.DefaultNetworkAddress(t, uri, testenv.AddrsNICs)
	holder := testenv.NewDHCPClient(t, bridge)
	if got := holder.Obtain(ctx, ip); got != ip {
		t.Fatalf("client %s asked for %s and got %s", holder.MAC, ip, got)
	}
	waitLeaseOf(t, ctx, conn, network, ip, holder.MAC)

	p, rec := newLeasePart(conn)
	mac, err := virt.GenerateMAC()
	if err != nil {
		t.Fatal(err)
	}
	lifecycle := func(in *model.Instance) {
		t.Helper()
		t.Cleanup(func() { // also after a failure
			for _, scope := range []string{"--live", "--config"} {
				_ = exec.Command("virsh", "-q", "-c", uri, "net-update", network, "delete", "ip-dhcp-host", "<host mac='"+in.NICs[0].MAC+"'/>", scope).Run()
			}
		})
		if err := p.Defined(ctx, part.Apply, &part.Instance{Spec: in}, revert.New(nil, "apply")); err != nil {
			t.Fatalf("apply %s: %v", in.Name, err)
		}
		if err := p.BeforeStart(ctx, &part.Instance{Spec: in}, revert.New(nil, "start")); err != nil {
			t.Fatalf("start %s: %v; want the start to go on", in.Name, err)
		}
	}
	remove := func(in *model.Instance) {
		t.Helper()
		r := revert.New(nil, "delete")
		if err := p.Remove(ctx, part.Delete, &part.Instance{Spec: in}, r); err != nil {
			t.Fatalf("delete %s: %v", in.Name, err)
		}
		r.Success()
		if err := p.AfterDelete(ctx, &part.Instance{Spec: in}); err != nil {
			t.Fatalf("after delete %s: %v", in.Name, err)
		}
	}

	in := fixedSpec(mac, ip)
	lifecycle(in)
	w := rec.warnings(t)
	if len(w) != 1 || w[0]["instance"] != "vm1" || w[0]["mac"] != mac || w[0]["address"] != ip || w[0]["holder_mac"] != holder.MAC || w[0]["expires"] == "never" {
		t.Fatalf("warnings at the start: %v; want one naming vm1, %s, %s and the holder %s with its lease's end", w, mac, ip, holder.MAC)
	}
	if len(rec.events) != 1 || !strings.HasPrefix(rec.events[0], events.StreamInstances+" "+EventAddressLeased+" ") || !strings.Contains(rec.events[0], `"holder_mac":"`+holder.MAC+`"`) {
		t.Fatalf("events: %v", rec.events)
	}
	t.Logf("reported: %s", rec.events[0])
	remove(in)

	// The holder's own instance: no report; its delete frees the address.
	rec.log.Reset()
	rec.events = nil
	own := fixedSpec(holder.MAC, ip)
	own.Name = "vm2"
	lifecycle(own)
	if w := rec.warnings(t); len(w) != 0 || len(rec.events) != 0 {
		t.Fatalf("the holder's own instance: warnings %v, events %v; want none", w, rec.events)
	}
	waitLeaseOf(t, ctx, conn, network, ip, holder.MAC) // vm1's delete left it alone
	remove(own)
	waitLeaseOf(t, ctx, conn, network, ip, "")
	if w := rec.warnings(t); len(w) != 0 {
		t.Errorf("warnings: %v", w)
	}
}

// waitLeaseOf polls network's leases until ip is leased to mac ("": to
// nobody); it fails the test at ctx's end.
func waitLeaseOf(t *testing.T, ctx context.Context, c *virt.Conn, network, ip, mac string) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		leases, err := c.ActiveLeases(ctx, network)
		if err != nil {
			t.Fatalf("ActiveLeases: %v", err)
		}
		holder := ""
		if i := slices.IndexFunc(leases, func(l virt.Lease) bool { return l.IP == ip }); i >= 0 {
			holder = leases[i].MAC
		}
		if holder == mac {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s is leased to %q, never to %q: %+v", ip, holder, mac, leases)
		case <-tick.C:
		}
	}
}
