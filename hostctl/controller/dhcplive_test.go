package controller

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/metadata"
)

// The fake's side of LiveDHCP: nets are the networks' persistent
// definitions, live their running leases where AddDHCPHostConfig left them
// behind.

func (f *fakeHV) addLive(network string, h virt.DHCPHost) {
	if f.live == nil {
		f.live = map[string][]virt.DHCPHost{}
	}
	f.live[network] = append(slices.DeleteFunc(f.live[network], func(e virt.DHCPHost) bool { return e.MAC == h.MAC }), h)
}

// liveOf is what the running network hands out: its persistent leases as
// they were when it started (none here: the fake's networks started
// empty), and every live update since.
func (f *fakeHV) liveOf(network string) []virt.DHCPHost {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.live[network])
}

func (f *fakeHV) AddDHCPHostConfig(ctx context.Context, network string, h virt.DHCPHost) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("AddDHCPHostConfig"); err != nil {
		return err
	}
	hs, ok := f.nets[network]
	if !ok {
		return notFound("network " + network)
	}
	for _, e := range hs {
		if e == h {
			return nil
		}
		if e.MAC == h.MAC || e.IP == h.IP {
			return fmt.Errorf("%w: the network has host %s -> %s", virt.ErrConflict, e.MAC, e.IP)
		}
	}
	f.nets[network] = append(hs, h)
	return nil
}

func (f *fakeHV) LiveDHCPHosts(ctx context.Context, network string) ([]virt.DHCPHost, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("LiveDHCPHosts"); err != nil {
		return nil, err
	}
	return slices.Clone(f.live[network]), nil
}

// RemoveLiveDHCPHost counts a live removal as a call "NetworkUpdateLive".
func (f *fakeHV) RemoveLiveDHCPHost(ctx context.Context, network, mac string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("RemoveLiveDHCPHost"); err != nil {
		return err
	}
	li := slices.IndexFunc(f.live[network], func(h virt.DHCPHost) bool { return h.MAC == mac })
	if li < 0 {
		return nil
	}
	f.calls = append(f.calls, "NetworkUpdateLive")
	f.live[network] = slices.Delete(f.live[network], li, li+1)
	return nil
}

// SyncLiveDHCPHosts counts each live update as a call "NetworkUpdateLive".
func (f *fakeHV) SyncLiveDHCPHosts(ctx context.Context, network string, macs []string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("SyncLiveDHCPHosts"); err != nil {
		return 0, err
	}
	n := 0
	for _, mac := range macs {
		ci := slices.IndexFunc(f.nets[network], func(h virt.DHCPHost) bool { return h.MAC == mac })
		li := slices.IndexFunc(f.live[network], func(h virt.DHCPHost) bool { return h.MAC == mac })
		switch {
		case ci < 0 && li < 0, ci >= 0 && li >= 0 && f.nets[network][ci] == f.live[network][li]:
			continue
		case ci >= 0:
			f.calls = append(f.calls, "NetworkUpdateLive")
			f.addLive(network, f.nets[network][ci])
		default:
			f.calls = append(f.calls, "NetworkUpdateLive")
			f.live[network] = slices.Delete(f.live[network], li, li+1)
		}
		n++
	}
	return n, nil
}

// countCalls counts the fake's calls named op from index from on.
func (f *fakeHV) countCalls(from int, ops ...string) map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[string]int{}
	for _, c := range f.calls[from:] {
		if slices.Contains(ops, c) {
			m[c]++
		}
	}
	return m
}

// TestApplyLibvirtCalls counts the libvirt calls of the publish path that
// cost (issue 23 item 4): a network update of a running network (libvirt
// reloads its firewall rules and dnsmasq: 0.5–1 s each) and a domain
// define. A new instance with one fixed lease makes one persistent-only
// lease write, no live update and one define (its firmware entries are in
// the first definition); an unchanged re-apply and a republish
// with the firmware entries on make no network update and no define; the
// start brings the lease to the running network (one live update), a
// second start none; a change of what the firmware carries redefines once.
func TestApplyLibvirtCalls(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	withFirmware(e, true) // export_firmwarepart_test.go
	ops := []string{"Define", "AddDHCPHost", "AddDHCPHostConfig", "RemoveDHCPHost", "NetworkUpdateLive"}
	step := func(what string, want map[string]int, f func()) {
		t.Helper()
		from := e.hv.callCount()
		f()
		got := e.hv.countCalls(from, ops...)
		for _, op := range ops {
			if got[op] != want[op] {
				t.Errorf("%s: %d %s calls, want %d (calls %v)", what, got[op], op, want[op], e.hv.calls[from:])
			}
		}
	}
	leases := []virt.DHCPHost{{MAC: "52:54:00:00:00:01", IP: "10.1.0.7"}, {MAC: "52:54:00:00:00:02", IP: "192.168.122.20"}}

	// One define: the definition the apply makes already names the
	// firmware entry files of the revision it publishes, which the
	// publish writes (hostctl/parts/firmware); it used to define the
	// domain a second time to add them.
	step("new instance", map[string]int{"Define": 1, "AddDHCPHostConfig": 2}, func() { e.mustApply(hvSpec) })
	checkFirmware(t, e, e.hv, "app-1", 1)
	if lv := e.hv.liveOf("default"); len(lv) != 0 {
		t.Errorf("the running network has %v before the domain starts", lv)
	}
	step("unchanged re-apply", nil, func() { e.mustApply(hvSpec) })
	checkFirmwareCurrent(t, e, "app-1", 1)
	step("start", map[string]int{"NetworkUpdateLive": 2}, func() {
		if _, err := e.c.Start(ctx, "app-1"); err != nil {
			t.Fatal(err)
		}
	})
	if lv := e.hv.liveOf("default"); !slices.Equal(lv, leases) {
		t.Errorf("running network after start: %v, want %v", lv, leases)
	}
	step("republish of a running instance", nil, func() {
		if inst := e.mustApply(hvSpec); inst.Revision != 3 {
			t.Errorf("revision %d", inst.Revision)
		}
	})
	checkFirmwareCurrent(t, e, "app-1", 1) // the entries of revision 1 are still current
	got, err := e.c.Get(ctx, "app-1")
	if err != nil {
		t.Fatal(err)
	}
	if fw := transportMap(got)[types.TransportFirmware]; fw.NextBoot != 1 || !strings.Contains(fw.Note, "unchanged since") {
		t.Errorf("firmware transport after an unchanged republish: %+v", fw)
	}
	if _, err := e.c.Stop(ctx, "app-1", 300*time.Millisecond); err != nil { // the fake guest ignores ACPI
		t.Fatal(err)
	}
	step("second start", nil, func() {
		if _, err := e.c.Start(ctx, "app-1"); err != nil {
			t.Fatal(err)
		}
	})
	step("a change the firmware carries", map[string]int{"Define": 1}, func() {
		e.mustApply(strings.Replace(hvSpec, "tag: data", "tag: data2", 1))
	})
	checkFirmware(t, e, e.hv, "app-1", 4)
}

// checkFirmwareCurrent: the persistent definition names the entry files of
// revision fwRev (the last publish that changed them), the only ones in
// the instance directory; their devices and uuid are the published tree's,
// their revision entry fwRev.
func checkFirmwareCurrent(t *testing.T, e *env, name string, fwRev int64) {
	t.Helper()
	ctx := context.Background()
	doc, err := e.hv.XML(ctx, name, false)
	if err != nil {
		t.Fatal(err)
	}
	files, err := virt.FirmwareFiles(doc)
	if err != nil {
		t.Fatal(err)
	}
	if got := virt.FirmwareRevision(files); got != fwRev || len(files) != 3 {
		t.Fatalf("persistent definition: entries %+v (revision %d), want 3 of revision %d", files, got, fwRev)
	}
	rec, err := e.st.Instance(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	sd, err := e.st.Document(ctx, rec.UUID)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := metadata.DecodeTree(sd.Tree)
	if err != nil {
		t.Fatal(err)
	}
	want, err := metadata.FirmwareEntries(tree)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range files {
		b, err := os.ReadFile(f.File)
		wantData := want[i].Data
		if f.Name == metadata.FirmwareRevision {
			wantData = []byte(fmt.Sprintf("%d\n", fwRev))
		}
		if err != nil || f.Name != want[i].Name || !bytes.Equal(b, wantData) {
			t.Errorf("entry %s (%s): %q, %v; want %s %q", f.Name, f.File, b, err, want[i].Name, wantData)
		}
	}
	if got := firmwareFilesOf(t, e, name); len(got) != 3 {
		t.Errorf("firmware files %v, want only revision %d's", got, fwRev)
	}
}
