package watchdog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/testenv"
)

// TestLibvirtDefinesWatchdog: the domain the core builds with the part's
// contribution is defined by the real libvirtd, and the XML libvirt
// returns has the i6300esb watchdog with the flavor's action, on a PCI
// address libvirt gave it.
func TestLibvirtDefinesWatchdog(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	qemuImg := testenv.LookPath(t, "qemu-img")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := virt.Connect(ctx, uri, virt.ConnOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("connect %s: %v", uri, err)
	}
	defer conn.Close()

	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "instances"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(qemuImg, "create", "-q", "-f", "qcow2", filepath.Join(dir, "instances", "vda.qcow2"), "16M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, out)
	}
	name := testenv.UniqueDomainName(t)
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	h := hex.EncodeToString(b)
	in := &model.Instance{Name: name, UUID: h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32], Flavor: "f.wd",
		Disks: []model.Disk{{Name: "vda", Bus: "virtio"}}}
	host := virt.Host{DataDir: dir, Disks: map[string]virt.DiskSource{"vda": {Path: "instances/vda.qcow2"}}}

	pi := &part.Instance{Spec: in, FlavorExtraSpecs: map[string]string{FlavorExtraSpec: PowerOff}}
	var c part.Contribution
	if err := New().Prepare(ctx, part.Apply, pi, nil, &c); err != nil {
		t.Fatal(err)
	}
	for _, d := range c.Devices {
		host.Extra = append(host.Extra, d.XML)
	}
	doc, err := virt.BuildDomain(in, host, virt.Options{MemoryMiB: 128})
	if err != nil {
		t.Fatal(err)
	}
	testenv.CleanupDomain(t, uri, name)
	if _, err := conn.Define(ctx, doc); err != nil {
		t.Fatalf("define: %v\n%s", err, doc)
	}
	got, err := conn.XML(ctx, name, false)
	if err != nil {
		t.Fatal(err)
	}
	var dom struct {
		Watchdogs []struct {
			Model   string `xml:"model,attr"`
			Action  string `xml:"action,attr"`
			Address *struct {
				Type string `xml:"type,attr"`
			} `xml:"address"`
		} `xml:"devices>watchdog"`
	}
	if err := xml.Unmarshal(got, &dom); err != nil {
		t.Fatal(err)
	}
	if len(dom.Watchdogs) != 1 {
		t.Fatalf("libvirt's XML has %d watchdogs:\n%s", len(dom.Watchdogs), got)
	}
	w := dom.Watchdogs[0]
	if w.Model != Model || w.Action != PowerOff || w.Address == nil || w.Address.Type != "pci" {
		t.Fatalf("watchdog %+v (address %+v), want i6300esb poweroff on a PCI address:\n%s", w, w.Address, got)
	}
}
