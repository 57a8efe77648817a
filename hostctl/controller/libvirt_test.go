package controller

// Tests against the real libvirtd test/setup starts (qemu:///system, TCG).

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/store/bolt"
	"github.com/vmeta/vmeta/internal/testenv"
)

func realEnv(t *testing.T) (*env, string) {
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
	dir := t.TempDir()
	b, err := bolt.Open(filepath.Join(dir, "vmeta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	e := &env{t: t, dir: dir, st: &failingStore{Store: b}}
	e.c = newController(e.st, Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler), Hypervisor: conn, QemuImg: qemuImg,
		Domain: virt.Options{MemoryMiB: 128}})
	return e, uri
}

func virshOut(t *testing.T, uri string, args ...string) string {
	t.Helper()
	out, err := exec.Command(testenv.LookPath(t, "virsh"), append([]string{"-q", "-c", uri}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("virsh %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestLibvirtPutFailsAfterDefine: the store refuses the publish after the
// domain was defined, the disks created and the DHCP leases added; the
// apply undoes all of it — libvirt has no domain and no lease, the data
// directory no file, the store no record.
func TestLibvirtPutFailsAfterDefine(t *testing.T) {
	e, uri := realEnv(t)
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	mac, err := virt.GenerateMAC()
	if err != nil {
		t.Fatal(err)
	}
	// 192.168.122.10-39: this test's share of the default network (the
	// virt tests take 100-249, the e2e tests 40-99).
	ip := fmt.Sprintf("192.168.122.%d", 10+rand.IntN(30))
	t.Cleanup(func() {
		_ = exec.Command("virsh", "-q", "-c", uri, "net-update", "default", "delete", "ip-dhcp-host", "<host mac='"+mac+"'/>", "--live", "--config").Run()
	})
	spec := "name: " + name + "\n" +
		"disks: [{name: vda, size: 8M, tag: root}, {name: sda, bus: scsi, size: 8M, tag: db}]\n" +
		"nics: [{mac: \"" + mac + "\", tag: front, ips: [{address: " + ip + "/24}]}]\n"

	e.st.failPut = true
	_, err = e.apply(spec)
	if err == nil || !strings.Contains(err.Error(), "injected failure") {
		t.Fatalf("apply: %v, want the injected store failure", err)
	}
	if out := virshOut(t, uri, "list", "--all", "--name"); strings.Contains(out, name) {
		t.Errorf("domain %s still defined:\n%s", name, out)
	}
	if out := virshOut(t, uri, "net-dumpxml", "default"); strings.Contains(out, mac) {
		t.Errorf("DHCP lease of %s still on the network", mac)
	}
	if entries, _ := os.ReadDir(e.dir); len(entries) != 1 || entries[0].Name() != "vmeta.db" {
		t.Errorf("data directory has %v, want only the store", entries)
	}
	if recs, _ := e.st.Instances(context.Background()); len(recs) != 0 {
		t.Errorf("store has %d records", len(recs))
	}

	// The same apply then works, and delete removes all of it.
	e.st.failPut = false
	inst, err := e.apply(spec)
	if err != nil {
		t.Fatal(err)
	}
	xml := virshOut(t, uri, "dumpxml", "--inactive", name)
	for _, d := range inst.Spec.Disks {
		if d.Address == "" || !strings.Contains(xml, filepath.Join(e.dir, "instances", name, "disk-"+d.Name+".qcow2")) {
			t.Errorf("disk %s: address %q, or its image is not in the domain", d.Name, d.Address)
		}
	}
	if out := virshOut(t, uri, "net-dumpxml", "default"); !strings.Contains(out, "<host mac='"+mac+"' ip='"+ip+"'/>") {
		t.Errorf("no DHCP lease %s -> %s", mac, ip)
	}
	if err := e.c.Delete(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	if out := virshOut(t, uri, "list", "--all", "--name"); strings.Contains(out, name) {
		t.Errorf("domain %s still defined after delete", name)
	}
	if out := virshOut(t, uri, "net-dumpxml", "default"); strings.Contains(out, mac) {
		t.Errorf("DHCP lease of %s still on the network after delete", mac)
	}
}
