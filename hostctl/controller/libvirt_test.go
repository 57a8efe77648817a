package controller

// Tests against the real libvirtd test/setup starts (qemu:///system, TCG).

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
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
	registerParts(e, conn) // export_nicspart_test.go
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
	ip := testenv.DefaultNetworkAddress(t, uri, testenv.AddrsController)
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
	if out := virshOut(t, uri, "net-dumpxml", "default") + virshOut(t, uri, "net-dumpxml", "--inactive", "default"); strings.Contains(out, mac) {
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
	// The lease is in the network's definition; the running network gets
	// it when the domain starts (LiveDHCP: no live update on apply).
	if out := virshOut(t, uri, "net-dumpxml", "--inactive", "default"); !strings.Contains(out, "<host mac='"+mac+"' ip='"+ip+"'/>") {
		t.Errorf("no DHCP lease %s -> %s", mac, ip)
	}
	if err := e.c.Delete(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	if out := virshOut(t, uri, "list", "--all", "--name"); strings.Contains(out, name) {
		t.Errorf("domain %s still defined after delete", name)
	}
	if out := virshOut(t, uri, "net-dumpxml", "default") + virshOut(t, uri, "net-dumpxml", "--inactive", "default"); strings.Contains(out, mac) {
		t.Errorf("DHCP lease of %s still on the network after delete", mac)
	}
}

// virshCdrom reads the config drive cdrom's medium from `virsh dumpxml`
// (live, or --inactive) with a regular expression, not hostctl/virt.
func virshCdrom(t *testing.T, uri, name string, live bool) string {
	t.Helper()
	args := []string{"dumpxml", name}
	if !live {
		args = append(args, "--inactive")
	}
	b := regexp.MustCompile(`(?s)<disk type='file' device='cdrom'>.*?</disk>`).FindString(virshOut(t, uri, args...))
	if b == "" {
		t.Fatalf("domain %s has no cdrom", name)
	}
	if m := regexp.MustCompile(`<source file='([^']*)'`).FindStringSubmatch(b); m != nil {
		return m[1]
	}
	return "(empty)"
}

// TestLibvirtMediumAndShares: against real libvirtd, a share under the
// share root becomes a virtiofs filesystem with shared memory (virtiofsd
// runs when the domain starts); every publish of the running domain
// swaps the cdrom's medium for the rebuilt drive while its persistent
// definition keeps disk.config; a publish that fails puts the previous
// medium back; NFS sources are refused before libvirt is asked.
func TestLibvirtMediumAndShares(t *testing.T) {
	t.Parallel() // its own domain; no NIC
	e, uri := realEnv(t)
	ctx := context.Background()
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	share := filepath.Join(e.dir, "shares", "data")
	if err := os.MkdirAll(share, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := "name: " + name + "\n" +
		"disks: [{name: vda, size: 8M, tag: root}, {name: sda, bus: scsi, size: 8M, tag: db, serial: d1}]\n" +
		"shares: [{share_id: " + shareID + ", tag: shared-data, source: " + share + "}]\n"
	if _, err := e.apply(strings.Replace(spec, share, "nfs.example.com:/export", 1)); err == nil || !strings.Contains(err.Error(), "must be an absolute host directory") {
		t.Fatalf("NFS share: %v", err)
	}
	if out := virshOut(t, uri, "list", "--all", "--name"); strings.Contains(out, name) {
		t.Fatalf("the refused spec defined domain %s", name)
	}
	if _, err := e.apply(spec); err != nil {
		t.Fatal(err)
	}
	xml := virshOut(t, uri, "dumpxml", "--inactive", name)
	for _, want := range []string{"<access mode='shared'/>", "<driver type='virtiofs'/>", "<source dir='" + share + "'/>", "<target dir='shared-data'/>"} {
		if !strings.Contains(xml, want) {
			t.Errorf("domain XML lacks %s:\n%s", want, xml)
		}
	}
	dir := filepath.Join(e.dir, "instances", name)
	drive := filepath.Join(dir, "disk.config")
	if _, err := e.c.Start(ctx, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.c.Stop(context.Background(), name, time.Second) })
	if got := virshCdrom(t, uri, name, true); got != drive {
		t.Fatalf("booted with medium %s, want %s", got, drive)
	}

	// check: after a publish that created revision rev, the running
	// domain's cdrom holds disk.config.<rev> with the tags want, and
	// nothing else is left.
	check := func(what string, rev int64, want []string) {
		t.Helper()
		medium := filepath.Join(dir, fmt.Sprintf("disk.config.%d", rev))
		if got := virshCdrom(t, uri, name, true); got != medium {
			t.Errorf("%s: live medium %s, want %s", what, got, medium)
		}
		if got := virshCdrom(t, uri, name, false); got != drive {
			t.Errorf("%s: persistent medium %s, want %s", what, got, drive)
		}
		if got := mediaFiles(t, e, name); len(got) != 1 || got[0] != filepath.Base(medium) {
			t.Errorf("%s: medium files %v, want only %s", what, got, filepath.Base(medium))
		}
		if got := driveTags(t, medium); !slices.Equal(got, want) {
			t.Errorf("%s: medium tags %v, want %v", what, got, want)
		}
	}
	inst, err := e.c.AttachDisk(ctx, name, types.DiskRequest{Tag: "hot", Bus: "scsi", Size: "8M", Serial: "hot-1"})
	if err != nil {
		t.Fatal(err)
	}
	check("attach-disk", inst.Revision, []string{"db", "hot", "root"})
	if inst, err = e.c.DetachDisk(ctx, name, types.DetachRequest{Tag: "hot"}); err != nil {
		t.Fatal(err)
	}
	check("detach-disk", inst.Revision, []string{"db", "root"})
	rev := inst.Revision

	// The store refuses the publish: the attached disk and the new medium
	// go again, the previous medium is back in the cdrom.
	e.st.failPut = true
	if _, err := e.c.AttachDisk(ctx, name, types.DiskRequest{Tag: "hot2", Bus: "scsi", Size: "8M", Serial: "hot-2"}); err == nil {
		t.Fatal("attach with a failing store succeeded")
	}
	e.st.failPut = false
	check("failed attach", rev, []string{"db", "root"})
	if strings.Contains(virshOut(t, uri, "dumpxml", name), "hot-2") {
		t.Error("the failed attach left its disk in the domain")
	}

	// Stopped: the medium files go; the next boot reads disk.config.
	if _, err := e.c.Stop(ctx, name, time.Second); err != nil {
		t.Fatal(err)
	}
	if got := mediaFiles(t, e, name); len(got) != 0 {
		t.Errorf("medium files after stop: %v", got)
	}
	if got := driveTags(t, drive); !slices.Equal(got, []string{"db", "root"}) {
		t.Errorf("disk.config tags %v", got)
	}
	if err := e.c.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
}
