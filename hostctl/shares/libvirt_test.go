package shares

// Tests against the real libvirtd test/setup starts (qemu:///system, TCG)
// and the virtiofsd it finds (QEMU's 7.2, /usr/lib/qemu/virtiofsd).

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/store"
	"github.com/vmeta/vmeta/internal/testenv"
)

func libvirtEnv(t *testing.T) (*env, string) {
	t.Helper()
	return libvirtEnvOn(t, "bolt")
}

// libvirtEnvOn is libvirtEnv over the named store backend, with the
// controller's options adjusted by more (fault injection).
func libvirtEnvOn(t *testing.T, backend string, more ...func(st store.Store, o *controller.Options)) (*env, string) {
	t.Helper()
	uri := testenv.RequireLibvirt(t)
	qemuImg := testenv.LookPath(t, "qemu-img")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := virt.Connect(ctx, uri, virt.ConnOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	e := newEnvWith(t, stores(t)[backend](t), func(dir string, o *controller.Options) {
		o.Hypervisor, o.QemuImg = conn, qemuImg
		o.Domain = virt.Options{MemoryMiB: 128}
		o.ShareRoot = filepath.Join(dir, "shares")
		o.DetachTimeout = 2 * time.Second
	}, more...)
	return e, uri
}

// domainName is a unique libvirt domain name with this branch's prefix,
// removed when the test ends.
func domainName(t *testing.T, uri string) string {
	t.Helper()
	name := "shares-" + strings.TrimPrefix(testenv.UniqueDomainName(t), "vmeta-test-")
	testenv.CleanupDomain(t, uri, name)
	return name
}

func virsh(t *testing.T, uri string, args ...string) string {
	t.Helper()
	out, err := exec.Command(testenv.LookPath(t, "virsh"), append([]string{"-q", "-c", uri}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("virsh %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// virtiofsdFor reports whether a virtiofsd process serves dir (libvirt
// passes it as -o source=DIR).
func virtiofsdFor(dir string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cmd, "virtiofsd") && strings.Contains(cmd, dir) {
			return true
		}
	}
	return false
}

// TestLibvirtShareLifecycle walks a local share through a real domain:
// attach to the shut-off domain (the persistent XML gets the virtiofs
// <filesystem> with the tag as target and memfd shared memory), start
// (libvirt starts virtiofsd for the directory; the mapping is active),
// attach while running refused (409), stop (inactive), detach (the
// filesystem leaves the domain and the metadata), then delete of an
// instance holding a share (mapping gone, share unlocked).
func TestLibvirtShareLifecycle(t *testing.T) {
	e, uri := libvirtEnv(t)
	ctx := context.Background()
	if err := e.svc.checkSupport(ctx); err != nil {
		t.Fatalf("this host's libvirt (domain capabilities): %v", err)
	}
	name := domainName(t, uri)
	u := e.instance(name, "demo")
	id := e.localShare("demo")
	dir := e.share(id).Export
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.AttachShare(ctx, admin, name, types.ServerShareAttach{ShareID: id, Tag: "data"}); err != nil {
		t.Fatal(err)
	}
	xml := virsh(t, uri, "dumpxml", "--inactive", name)
	for _, want := range []string{"<filesystem type='mount' accessmode='passthrough'>", "<driver type='virtiofs'", "<source dir='" + dir + "'/>",
		"<target dir='data'/>", "<alias name='ua-fs-data'/>", "<source type='memfd'/>", "<access mode='shared'/>"} {
		if !strings.Contains(xml, want) {
			t.Errorf("persistent XML lacks %s:\n%s", want, xml)
		}
	}
	if _, err := e.ctl.Start(ctx, name); err != nil {
		t.Fatalf("start with a virtiofs share: %v", err)
	}
	if m, _ := e.mapping(u, id); m.Status != types.ShareActive {
		t.Errorf("after start: %s, want active", m.Status)
	}
	if live := virsh(t, uri, "dumpxml", name); !strings.Contains(live, "<target dir='data'/>") {
		t.Errorf("live XML lacks the share:\n%s", live)
	}
	waitFor(t, "virtiofsd serving "+dir, func() bool { return virtiofsdFor(dir) })

	// The specification's rule: attach only to SHUTOFF instances.
	other := e.localShare("demo")
	_, err := e.svc.AttachShare(ctx, admin, name, types.ServerShareAttach{ShareID: other})
	if !errors.Is(err, controller.ErrState) || !strings.Contains(err.Error(), "is running") {
		t.Errorf("attach while running: %v", err)
	}
	if _, err := e.svc.DetachShare(ctx, admin, name, id, false); !errors.Is(err, controller.ErrState) {
		t.Errorf("detach while running: %v", err)
	}

	if _, err := e.ctl.Stop(ctx, name, time.Second); err != nil {
		t.Fatal(err)
	}
	if m, _ := e.mapping(u, id); m.Status != types.ShareInactive {
		t.Errorf("after stop: %s, want inactive", m.Status)
	}
	waitFor(t, "virtiofsd to exit", func() bool { return !virtiofsdFor(dir) })

	if _, err := e.svc.DetachShare(ctx, admin, name, id, false); err != nil {
		t.Fatal(err)
	}
	if xml := virsh(t, uri, "dumpxml", "--inactive", name); strings.Contains(xml, "<filesystem") {
		t.Errorf("persistent XML still has a filesystem:\n%s", xml)
	}
	e.wantDetached("after detach", u, name, id)

	// Delete of an instance holding a share detaches it.
	if _, err := e.svc.AttachShare(ctx, admin, name, types.ServerShareAttach{ShareID: id}); err != nil {
		t.Fatal(err)
	}
	if err := e.ctl.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.mapping(u, id); ok {
		t.Error("mapping of the deleted instance kept")
	}
	if len(e.share(id).Holders) != 0 {
		t.Error("share still locked by the deleted instance")
	}
	if err := e.svc.DeleteShare(ctx, admin, id); err != nil {
		t.Errorf("delete of the released share: %v", err)
	}
	if _, err := loadShare(ctx, e.st, id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("share still there: %v", err)
	}
}

// TestLibvirtLiveAttach: beyond the specification, a share is hot-plugged
// into a running domain that booted with shared memory (libvirt 9.0 with
// QEMU's virtiofsd 7.2 accept it: virtiofsd starts for the directory, the
// live and persistent XML and the metadata get it, the mapping is
// active), and hot-unplugged again (this guest runs no OS, so it never
// releases the device: the detach completes with the warning that the
// running domain lets go when the guest does). A running domain without
// shared memory is refused, naming why.
func TestLibvirtLiveAttach(t *testing.T) {
	e, uri := libvirtEnv(t)
	ctx := context.Background()
	name := domainName(t, uri)
	u := e.instance(name, "demo")
	first, second := e.localShare("demo"), e.localShare("demo")
	e.attach(name, first)
	if _, err := e.ctl.Start(ctx, name); err != nil {
		t.Fatal(err)
	}
	m, err := e.svc.AttachShare(ctx, admin, name, types.ServerShareAttach{ShareID: second, Tag: "hot", Live: true})
	if err != nil {
		t.Fatalf("live attach: %v", err)
	}
	if m.Status != types.ShareActive {
		t.Errorf("live attach answered %+v, want active", m)
	}
	dir := e.share(second).Export
	for _, live := range []bool{true, false} {
		args := []string{"dumpxml", name}
		if !live {
			args = append(args, "--inactive")
		}
		if xml := virsh(t, uri, args...); !strings.Contains(xml, "<target dir='hot'/>") || !strings.Contains(xml, "<source dir='"+dir+"'/>") {
			t.Errorf("XML (live %v) lacks the hot-plugged share:\n%s", live, xml)
		}
	}
	waitFor(t, "virtiofsd serving "+dir, func() bool { return virtiofsdFor(dir) })
	e.wantAttached("after the live attach", u, name, second, types.ShareActive)

	if _, err := e.svc.DetachShare(ctx, admin, name, second, true); err != nil {
		t.Fatalf("live detach: %v", err)
	}
	e.wantDetached("after the live detach", u, name, second)
	if xml := virsh(t, uri, "dumpxml", "--inactive", name); strings.Contains(xml, "<target dir='hot'/>") {
		t.Errorf("persistent XML still has the share:\n%s", xml)
	}
	if !strings.Contains(e.logs.String(), "has not released it") {
		t.Errorf("no warning about the pending live detach in the log")
	}

	// A domain that booted without shared memory.
	other := domainName(t, uri)
	e.instance(other, "demo")
	if _, err := e.ctl.Start(ctx, other); err != nil {
		t.Fatal(err)
	}
	third := e.localShare("demo")
	before := e.snapshot()
	_, err = e.svc.AttachShare(ctx, admin, other, types.ServerShareAttach{ShareID: third, Live: true})
	if !errors.Is(err, controller.ErrState) || !strings.Contains(err.Error(), "memory is not shared") {
		t.Errorf("live attach without shared memory: %v", err)
	}
	if after := e.snapshot(); after != before {
		t.Errorf("the refused live attach changed something:\n%s\n---\n%s", before, after)
	}
}

// TestLibvirtSpecShare: against real libvirtd, an instance created from a
// spec naming a registered share gets the share through the share model:
// the domain is defined (shut off) with the share's virtiofs filesystem
// of the registry's directory, the mapping is inactive and the share
// locked; a spec naming it for a running instance is refused, and after
// a start the mapping is active. Issue 20, item 16.
func TestLibvirtSpecShare(t *testing.T) {
	e, uri := libvirtEnv(t)
	ctx := context.Background()
	name := domainName(t, uri)
	id := e.localShare("demo")
	dir := e.share(id).Export
	inst, err := e.ctl.Apply(ctx, []byte("name: "+name+"\nproject_id: demo\ndisks: [{name: vda, size: 8M}]\nshares: [{share_id: "+id+", tag: data}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	u := inst.Spec.UUID
	if m, ok := e.mapping(u, id); !ok || m.Status != types.ShareInactive || m.Host != "host-a" {
		t.Fatalf("mapping %+v %v, want inactive", m, ok)
	}
	if sh := e.share(id); len(sh.Holders) != 1 || sh.Holders[0].Instance != u {
		t.Errorf("holders %+v", sh.Holders)
	}
	xml := virsh(t, uri, "dumpxml", "--inactive", name)
	for _, want := range []string{"<access mode='shared'/>", "<driver type='virtiofs'/>", "<source dir='" + dir + "'/>", "<target dir='data'/>"} {
		if !strings.Contains(xml, want) {
			t.Errorf("domain XML lacks %s:\n%s", want, xml)
		}
	}
	if st := strings.TrimSpace(virsh(t, uri, "domstate", name)); st != "shut off" {
		t.Errorf("domain state %q, want shut off", st)
	}
	if _, err := e.ctl.Start(ctx, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.ctl.Stop(context.Background(), name, time.Second) })
	if m, _ := e.mapping(u, id); m.Status != types.ShareActive {
		t.Errorf("after the start: %+v, want active", m)
	}
	other := e.localShare("demo")
	_, err = e.ctl.Apply(ctx, []byte("name: "+name+"\nproject_id: demo\ndisks: [{name: vda, size: 8M}]\nshares: [{share_id: "+id+", tag: data}, {share_id: "+other+"}]\n"))
	if !errors.Is(err, controller.ErrState) || !strings.Contains(err.Error(), "the instance is running; shares are attached to SHUTOFF instances") {
		t.Errorf("a spec attaching a share to a running instance: %v", err)
	}
	if _, ok := e.mapping(u, other); ok {
		t.Error("the refused spec left a mapping")
	}
}
