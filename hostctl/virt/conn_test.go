package virt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/testenv"
)

// TestConnectUnreachable needs no libvirtd: a missing socket, a socket
// nobody listens on, and a listener that never answers each give an
// *UnreachableError naming the socket.
func TestConnectUnreachable(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing-sock")

	refused := filepath.Join(dir, "refused-sock")
	l, err := net.Listen("unix", refused)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()

	silent := filepath.Join(dir, "silent-sock")
	sl, err := net.Listen("unix", silent)
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()
	go func() { // accept and say nothing
		for {
			c, err := sl.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()

	for _, tc := range []struct {
		name, socket string
		timeout      time.Duration
		says         string
	}{
		{"missing socket", missing, 5 * time.Second, "no such file or directory"},
		{"nobody listening", refused, 5 * time.Second, "connection refused"},
		{"never answers", silent, 300 * time.Millisecond, "context deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			c, err := Connect(ctx, "qemu:///system", ConnOptions{Socket: tc.socket})
			if err == nil {
				c.Close()
				t.Fatal("Connect succeeded")
			}
			var ue *UnreachableError
			if !errors.As(err, &ue) || !errors.Is(err, ErrUnreachable) {
				t.Fatalf("error %v (%T) is not an UnreachableError", err, err)
			}
			want := "libvirtd at " + tc.socket + " is unreachable: "
			if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q; want %q... %q", err, want, tc.says)
			}
		})
	}

	// The socket can also come from the URI.
	_, err = Connect(context.Background(), "qemu:///system?socket="+missing, ConnOptions{})
	if err == nil || !strings.Contains(err.Error(), "libvirtd at "+missing+" is unreachable") {
		t.Errorf("socket from URI: %v", err)
	}
}

func TestConnOperations(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	ctx := testCtx(t, time.Minute)
	c := connect(t, uri, ConnOptions{})
	if v, err := c.Version(ctx); err != nil || !strings.Contains(v, ".") {
		t.Errorf("Version = %q, %v", v, err)
	}
	name := testenv.UniqueDomainName(t)
	for op, f := range map[string]func() error{
		"start":      func() error { return c.Start(ctx, name) },
		"destroy":    func() error { return c.Destroy(ctx, name) },
		"undefine":   func() error { return c.undefine(ctx, name) },
		"shut down":  func() error { return c.Shutdown(ctx, name) },
		"get XML of": func() error { _, err := c.XML(ctx, name, true); return err },
		"look up":    func() error { _, err := c.Lookup(ctx, name); return err },
		"update device (live+force) of": func() error {
			return c.UpdateDevice(ctx, name, []byte("<disk/>"), AffectLive|AffectForce)
		},
	} {
		err := f()
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s of a missing domain: %v, want ErrNotFound", op, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), op+" domain "+name+": ") {
			t.Errorf("%s: error %q does not name the operation and domain", op, err)
		}
	}
	if err := c.Remove(ctx, name); err != nil {
		t.Errorf("Remove of a missing domain: %v", err)
	}
	if _, err := c.lookupUUID(ctx, randomUUID(t)); !errors.Is(err, ErrNotFound) {
		t.Errorf("LookupUUID of a missing domain: %v", err)
	}
	if _, err := c.Define(ctx, []byte("<domain type='qemu'><name>"+name+"</name><devices><bogus/></devices></domain>")); err == nil ||
		!strings.HasPrefix(err.Error(), "define domain "+name+": ") {
		t.Errorf("Define of invalid XML: %v", err)
	}

	// A domain defined through Conn is found by name and UUID and listed.
	d := newTestDataDir(t, "vda")
	in := integrationInstance(t, name, d)
	in.Disks, in.Shares = in.Disks[:1], nil
	doc, err := BuildDomain(in, d.host, Options{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.CleanupDomain(t, uri, name)
	if _, err := c.Define(ctx, doc); err != nil {
		t.Fatal(err)
	}
	if dom, err := c.lookupUUID(ctx, in.UUID); err != nil || dom.Name != name {
		t.Errorf("LookupUUID = %+v, %v", dom, err)
	}
	if st, err := c.State(ctx, name); err != nil || st != StateShutoff {
		t.Errorf("State = %q, %v; want shutoff", st, err)
	}
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, dom := range list {
		found = found || (dom.Name == name && dom.UUID == in.UUID)
	}
	if !found {
		t.Errorf("List lacks %s", name)
	}
	if err := c.Remove(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lookup(ctx, name); !errors.Is(err, ErrNotFound) {
		t.Errorf("after Remove: %v", err)
	}

	// After Close every call says so.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lookup(ctx, name); !errors.Is(err, ErrClosed) {
		t.Errorf("Lookup after Close: %v", err)
	}
}

// TestDHCPHosts adds a fixed lease to the default network, checks that
// `virsh net-dumpxml default` (live and persistent) shows it, and removes
// it again.
func TestDHCPHosts(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	ctx := testCtx(t, time.Minute)
	c := connect(t, uri, ConnOptions{})
	const network = "default"
	mac, err := GenerateMAC()
	if err != nil {
		t.Fatal(err)
	}
	ip := testenv.DefaultNetworkAddress(t, uri, testenv.AddrsVirt)
	h := DHCPHost{MAC: mac, IP: ip, Name: testenv.UniqueDomainName(t)}
	t.Cleanup(func() { // also after a failure
		_ = exec.Command("virsh", "-q", "-c", uri, "net-update", network, "delete", "ip-dhcp-host",
			fmt.Sprintf("<host mac='%s'/>", mac), "--live", "--config").Run()
	})

	start := time.Now()
	if err := c.AddDHCPHost(ctx, network, h); err != nil {
		t.Fatalf("AddDHCPHost: %v", err)
	}
	t.Logf("add DHCP host: %s", time.Since(start))
	want := fmt.Sprintf("<host mac='%s' name='%s' ip='%s'/>", mac, h.Name, ip)
	for _, args := range [][]string{{"net-dumpxml", network}, {"net-dumpxml", network, "--inactive"}} {
		if out := virsh(t, uri, args...); !strings.Contains(out, want) {
			t.Errorf("virsh %s lacks %s:\n%s", strings.Join(args, " "), want, out)
		}
	}
	if err := c.AddDHCPHost(ctx, network, h); err != nil {
		t.Errorf("adding the same lease again: %v", err)
	}
	other := h
	other.IP = "192.168.122.99"
	if err := c.AddDHCPHost(ctx, network, other); !errors.Is(err, ErrConflict) {
		t.Errorf("same MAC, other IP: %v, want ErrConflict", err)
	}
	if err := c.AddDHCPHost(ctx, network, DHCPHost{MAC: "nope", IP: ip}); err == nil {
		t.Error("bad MAC accepted")
	}
	if err := c.AddDHCPHost(ctx, "vmeta-no-such-network", h); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown network: %v, want ErrNotFound", err)
	}
	hosts, err := c.DHCPHosts(ctx, network)
	if err != nil {
		t.Fatal(err)
	}
	if n := countHost(hosts, mac); n != 1 {
		t.Errorf("DHCPHosts has %d entries for %s", n, mac)
	}

	start = time.Now()
	if err := c.RemoveDHCPHost(ctx, network, strings.ToUpper(mac)); err != nil {
		t.Fatalf("RemoveDHCPHost: %v", err)
	}
	t.Logf("remove DHCP host: %s", time.Since(start))
	for _, args := range [][]string{{"net-dumpxml", network}, {"net-dumpxml", network, "--inactive"}} {
		if out := virsh(t, uri, args...); strings.Contains(out, mac) {
			t.Errorf("virsh %s still has %s", strings.Join(args, " "), mac)
		}
	}
	if err := c.RemoveDHCPHost(ctx, network, mac); err != nil {
		t.Errorf("removing an absent lease: %v", err)
	}
}

func countHost(hosts []DHCPHost, mac string) int {
	n := 0
	for _, h := range hosts {
		if h.MAC == mac {
			n++
		}
	}
	return n
}

// TestReconnect kills libvirtd under a subscribed Conn, starts it again,
// and checks that the Conn reconnects by itself and that lifecycle events
// flow again. The daemon is the one test/setup started (its pid file); it
// is restarted in a cleanup even when the test fails.
func TestReconnect(t *testing.T) {
	uri := testenv.RequireLibvirtExclusive(t)
	if os.Getenv(testenv.LibvirtSocketEnv) != "" {
		t.Skip("the reconnect test restarts the system libvirtd; a custom socket is set")
	}
	libvirtd := testenv.LookPath(t, "libvirtd")
	pid := testenv.LibvirtdPid()
	if pid == 0 {
		testenv.Require(t, "restartable libvirtd", testenv.LibvirtdPidFile+" names no running libvirtd (start it with test/setup)")
	}
	t.Cleanup(func() { ensureLibvirtd(t, uri, libvirtd) })

	c := connect(t, uri, ConnOptions{Events: true, MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond})
	ctx := testCtx(t, 3*time.Minute)
	defineUndefine(t, ctx, c, uri)

	// Kill libvirtd (SIGTERM, by pid) and wait for the Conn to notice.
	killed := time.Now()
	if err := syscallKill(pid); err != nil {
		t.Fatalf("kill libvirtd %d: %v", pid, err)
	}
	waitEvent(t, c, 30*time.Second, func(ev Event) bool { return ev.Kind == EventDisconnected })
	t.Logf("disconnect noticed after %s", time.Since(killed).Round(time.Millisecond))
	if c.connected() {
		t.Error("Connected() while libvirtd is down")
	}
	_, err := c.Lookup(ctx, "anything")
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "libvirtd at "+DefaultSocket+" is unreachable") {
		t.Errorf("call while down: %v", err)
	}
	t.Logf("call while down: %v", err)
	waitExit(t, pid)

	restarted := time.Now()
	if out, err := exec.Command(libvirtd, "-d").CombinedOutput(); err != nil {
		t.Fatalf("libvirtd -d: %v: %s", err, out)
	}
	waitEvent(t, c, time.Minute, func(ev Event) bool { return ev.Kind == EventReconnected })
	t.Logf("reconnected %s after libvirtd was started again (down %s in all)",
		time.Since(restarted).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	if err := c.waitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	defineUndefine(t, ctx, c, uri)
}

// defineUndefine defines and undefines a domain and waits for both events.
func defineUndefine(t *testing.T, ctx context.Context, c *Conn, uri string) {
	t.Helper()
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	doc := fmt.Sprintf("<domain type='qemu'><name>%s</name><memory unit='MiB'>64</memory><os><type arch='x86_64' machine='q35'>hvm</type></os></domain>", name)
	if _, err := c.Define(ctx, []byte(doc)); err != nil {
		t.Fatalf("Define: %v", err)
	}
	waitEvent(t, c, 30*time.Second, func(ev Event) bool { return ev.Kind == EventDefined && ev.Domain == name })
	if err := c.undefine(ctx, name); err != nil {
		t.Fatalf("Undefine: %v", err)
	}
	waitEvent(t, c, 30*time.Second, func(ev Event) bool { return ev.Kind == EventUndefined && ev.Domain == name })
}

func waitExit(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for testenv.ProcessRunning(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("libvirtd %d still runs 30s after SIGTERM", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ensureLibvirtd starts libvirtd if it does not answer (a failed
// TestReconnect must not leave the machine without one).
func ensureLibvirtd(t *testing.T, uri, libvirtd string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := Connect(ctx, uri, ConnOptions{}); err == nil {
		c.Close()
		return
	}
	if testenv.LibvirtdPid() == 0 {
		if out, err := exec.Command(libvirtd, "-d").CombinedOutput(); err != nil {
			t.Errorf("cleanup: libvirtd -d: %v: %s", err, out)
			return
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := Connect(ctx, uri, ConnOptions{})
		cancel()
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("cleanup: libvirtd does not answer 30s after restart")
}
