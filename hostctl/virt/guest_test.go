package virt

// Tests with a running Linux guest (Debian's kernel and a busybox
// initramfs, booted directly under TCG): what the guest itself sees of the
// addresses vmeta reads from libvirt, and live detach, which needs the
// guest to let go of a PCI device.

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/testenv"
)

// guestBootTimeout bounds a TCG boot to the guest's ready line.
const guestBootTimeout = 3 * time.Minute

// guestReport is the guest's view of its devices, printed on its console.
const guestReport = `
echo "vmeta-guest: dmi product=$(cat /sys/class/dmi/id/product_name) vendor=$(cat /sys/class/dmi/id/sys_vendor) uuid=$(cat /sys/class/dmi/id/product_uuid)"
for b in /sys/block/vd* /sys/block/sd* /sys/block/sr*; do
	[ -e "$b" ] || continue
	# virtio-blk has a serial attribute; SCSI and SATA (libata's SCSI
	# translation) disks report theirs in VPD page 0x80, after 4 header bytes.
	serial=$(cat $b/serial 2>/dev/null || tail -c +5 $b/device/vpd_pg80 2>/dev/null | tr -d ' \0')
	echo "vmeta-guest: block ${b##*/} $(readlink -f $b/device) serial=$serial"
done
for h in /sys/bus/scsi/devices/*:*:*:*; do
	[ -e "$h" ] || continue
	echo "vmeta-guest: scsi ${h##*/} $(readlink -f $h) block=$(ls $h/block 2>/dev/null)"
done
for n in /sys/class/net/*; do
	[ "${n##*/}" = lo ] && continue
	echo "vmeta-guest: net ${n##*/} $(cat $n/address) $(readlink -f $n/device)"
done
if mount -t virtiofs shared-data /mnt; then
	echo "vmeta-guest: virtiofs shared-data $(cat /mnt/hello.txt)"
else
	echo "vmeta-guest: virtiofs mount failed"
fi
`

var (
	reGuestLine = regexp.MustCompile(`(?m)^vmeta-guest: (\S+) (.*?)\r?$`)
	rePCIComp   = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
	reHCTL      = regexp.MustCompile(`^(\d+):(\d+):(\d+):(\d+)$`)
	reATA       = regexp.MustCompile(`^ata(\d+)$`)
)

// sysfsPath splits a guest sysfs device path into the PCI function it
// hangs off (the last PCI component), the ATA port link (ataN, 0 if none)
// and the SCSI H:C:T:L (last component, "" if none).
func sysfsPath(p string) (pci string, ata int, hctl string) {
	parts := strings.Split(p, "/")
	for _, c := range parts {
		if rePCIComp.MatchString(c) {
			pci = c
		}
		if m := reATA.FindStringSubmatch(c); m != nil {
			ata = atoi(m[1])
		}
	}
	if last := parts[len(parts)-1]; reHCTL.MatchString(last) {
		hctl = last
	}
	return pci, ata, hctl
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// guestDomain defines and starts a domain that boots the test guest with
// script, and returns the console log path.
func guestDomain(t *testing.T, c *Conn, uri string, in *model.Instance, d *testDataDir, script string) string {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	g := testenv.BuildGuest(t, d.dir, script)
	doc, err := BuildDomain(in, d.host, Options{MemoryMiB: 256, Kernel: g.Kernel, Initrd: g.Initrd, Cmdline: g.Cmdline})
	if err != nil {
		t.Fatal(err)
	}
	testenv.CleanupDomain(t, uri, in.Name)
	if _, err := c.Define(ctx, doc); err != nil {
		t.Fatalf("Define: %v", err)
	}
	if err := c.Start(ctx, in.Name); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return filepath.Join(d.dir, d.host.SerialLog)
}

// TestGuestSeesAddresses boots a Linux guest on the domain of
// TestDomainAddresses and checks that the guest finds each device where
// the address read from libvirt says: virtio disks and NICs at that PCI
// address (so libvirt's PCI bus numbers are the guest's), the SCSI disk at
// channel:target:lun = libvirt's bus:target:unit on the virtio-scsi
// controller's PCI function, the SATA disk and the config drive on AHCI
// port unit (ata<unit+1>), the SMBIOS identity, and the virtiofs share.
func TestGuestSeesAddresses(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	ctx := testCtx(t, guestBootTimeout+time.Minute)
	c := connect(t, uri, ConnOptions{})
	d := newTestDataDir(t, "vda", "vdb", "sda", "sdb")
	if err := os.WriteFile(filepath.Join(d.share, "hello.txt"), []byte("hello-from-the-host"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := integrationInstance(t, testenv.UniqueDomainName(t), d)

	start := time.Now()
	console := guestDomain(t, c, uri, in, d, guestReport)
	out := testenv.WaitConsole(t, console, testenv.GuestDone, guestBootTimeout)
	t.Logf("guest boot and report under TCG: %s", time.Since(start).Round(time.Millisecond))

	_, devs := domainDevices(t, ctx, c, in.Name, false) // the guest may already be off
	if err := devs.Apply(in); err != nil {
		t.Fatal(err)
	}

	blocks := map[string]guestBlock{} // guest block name -> where
	scsiBlock := map[string]string{}  // H:C:T:L -> block name
	nets := map[string]string{}       // MAC -> PCI
	var dmi, virtiofs string
	for _, m := range reGuestLine.FindAllStringSubmatch(out, -1) {
		t.Logf("guest: %s %s", m[1], m[2])
		f := strings.Fields(m[2])
		switch m[1] {
		case "dmi":
			dmi = m[2]
		case "block":
			pci, ata, hctl := sysfsPath(f[1])
			blocks[f[0]] = guestBlock{pci: pci, ata: ata, hctl: hctl, serial: strings.TrimPrefix(f[2], "serial=")}
		case "scsi":
			if len(f) > 2 {
				scsiBlock[f[0]] = strings.TrimPrefix(f[2], "block=")
			}
		case "net":
			pci, _, _ := sysfsPath(f[2])
			nets[f[1]] = pci
		case "virtiofs":
			virtiofs = m[2]
		}
	}

	for _, want := range []string{"product=OpenStack Nova", "vendor=OpenStack Foundation", "uuid=" + in.UUID} {
		if !strings.Contains(dmi, want) {
			t.Errorf("guest DMI %q lacks %s", dmi, want)
		}
	}
	if virtiofs != "shared-data hello-from-the-host" {
		t.Errorf("virtiofs in the guest: %q", virtiofs)
	}
	for i, n := range in.NICs {
		if got := nets[n.MAC]; got != n.Address {
			t.Errorf("nics[%d] %s: libvirt says %s, the guest finds it at %q", i, n.MAC, n.Address, got)
		}
	}
	// virtio disks: the guest's block device with the spec serial sits at
	// the PCI address libvirt reported.
	for _, k := range in.Disks {
		x, _ := devs.Disk(k.Name)
		switch k.Bus {
		case model.DiskBusVirtio:
			found := false
			for name, b := range blocks {
				if b.serial == k.Serial {
					found = true
					if b.pci != k.Address {
						t.Errorf("disk %s: libvirt says %s, the guest has %s (serial %s) at %s", k.Name, k.Address, name, k.Serial, b.pci)
					}
				}
			}
			if !found {
				t.Errorf("disk %s: the guest has no block device with serial %s", k.Name, k.Serial)
			}
		case model.DiskBusSCSI:
			// Channel, target and LUN are libvirt's bus, target and
			// unit; the parent is the virtio-scsi controller.
			found := false
			for name, b := range blocks {
				m := reHCTL.FindStringSubmatch(b.hctl)
				if m == nil || b.pci != x.ControllerAddress {
					continue
				}
				found = true
				if atoi(m[2]) != x.Drive.Bus || atoi(m[3]) != x.Drive.Target || atoi(m[4]) != x.Drive.Unit {
					t.Errorf("disk %s: libvirt drive address %s, guest %s at H:C:T:L %s", k.Name, k.Address, name, b.hctl)
				}
				t.Logf("SCSI mapping: libvirt controller:bus:target:unit %s (controller at %s) = guest %s H:C:T:L %s", k.Address, x.ControllerAddress, name, b.hctl)
			}
			if !found {
				t.Errorf("disk %s: no guest SCSI disk behind the controller at %s", k.Name, x.ControllerAddress)
			}
			checkSerial(t, k, blocks)
		case model.DiskBusSATA:
			checkATA(t, k.Name, x, blocks2ata(blocks))
			checkSerial(t, k, blocks)
		}
	}
	cd, ok := devs.Disk("sdc")
	if !ok || cd.Device != "cdrom" {
		t.Fatalf("no config drive cdrom sdc: %+v", devs.Disks)
	}
	checkATA(t, "config drive", cd, blocks2ata(blocks))
}

// guestBlock is where the guest found a block device.
type guestBlock struct {
	pci, hctl, serial string
	ata               int
}

type ataDisk struct{ name, pci, hctl string }

func blocks2ata(blocks map[string]guestBlock) map[int]ataDisk {
	out := map[int]ataDisk{}
	for name, b := range blocks {
		if b.ata > 0 {
			out[b.ata] = ataDisk{name, b.pci, b.hctl}
		}
	}
	return out
}

// checkATA: a SATA drive address controller:0:0:unit is AHCI port unit,
// which Linux calls ata<unit+1> (q35's AHCI controller is the only ATA
// host), with H:C:T:L <host>:0:0:0.
func checkATA(t *testing.T, what string, x DiskInfo, ports map[int]ataDisk) {
	t.Helper()
	g, ok := ports[x.Drive.Unit+1]
	if !ok {
		t.Errorf("%s: libvirt drive address %s, but the guest has no disk on ata%d (has %v)", what, x.Address, x.Drive.Unit+1, ports)
		return
	}
	if g.pci != x.ControllerAddress || !strings.HasSuffix(g.hctl, ":0:0:0") {
		t.Errorf("%s: guest %s at %s H:C:T:L %s; want under the AHCI controller %s, :0:0:0", what, g.name, g.pci, g.hctl, x.ControllerAddress)
	}
	t.Logf("SATA mapping: libvirt %s (AHCI at %s) = guest %s on ata%d, H:C:T:L %s", x.Address, x.ControllerAddress, g.name, x.Drive.Unit+1, g.hctl)
}

// checkSerial: some guest disk carries the spec serial unchanged.
func checkSerial(t *testing.T, k model.Disk, blocks map[string]guestBlock) {
	t.Helper()
	for _, b := range blocks {
		if b.serial == k.Serial {
			return
		}
	}
	t.Errorf("disk %s (%s): no guest disk has serial %q", k.Name, k.Bus, k.Serial)
}

// waitEvent reads events until one matches or timeout passes.
func waitEvent(t *testing.T, c *Conn, timeout time.Duration, match func(Event) bool) Event {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-c.Events():
			if !ok {
				t.Fatal("events channel closed")
			}
			t.Logf("event: %s", ev)
			if match(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no matching event within %s", timeout)
			return Event{}
		}
	}
}

// TestHotplug attaches a virtio disk, a SCSI disk and a NIC, live and
// persistently, to a running guest, reads their addresses back from the
// live and the inactive XML, then detaches them (the NIC by alias) and
// waits until libvirt reports each removed and both XMLs are without it.
func TestHotplug(t *testing.T) {
	uri := testenv.RequireLibvirt(t)
	ctx := testCtx(t, guestBootTimeout+3*time.Minute)
	c := connect(t, uri, ConnOptions{Events: true})
	d := newTestDataDir(t, "vda", "vdb", "sdb")
	mac, err := GenerateMAC()
	if err != nil {
		t.Fatal(err)
	}
	in := &model.Instance{
		Name:  testenv.UniqueDomainName(t),
		UUID:  randomUUID(t),
		Disks: []model.Disk{{Name: "vda", Bus: "virtio", Serial: "root"}},
		NICs:  []model.NIC{{MAC: mac}},
	}
	hostNoDisks := d.host
	hostNoDisks.Disks = map[string]DiskSource{"vda": d.host.Disks["vda"]}
	d2 := *d
	d2.host = hostNoDisks
	console := guestDomain(t, c, uri, in, &d2, "while true; do sleep 1; done")
	start := time.Now()
	testenv.WaitConsole(t, console, testenv.GuestReady, guestBootTimeout)
	t.Logf("guest up under TCG after %s", time.Since(start).Round(time.Millisecond))

	nicMAC, err := GenerateMAC()
	if err != nil {
		t.Fatal(err)
	}
	type plugged struct {
		kind, key, alias string
		xml              []byte
	}
	// The config drive took sda: hot-plugged disks take names the domain
	// leaves free.
	_, before := domainDevices(t, ctx, c, in.Name, true)
	if got := before.FreeTarget("virtio") + " " + before.FreeTarget("scsi"); got != "vdb sdb" {
		t.Fatalf("FreeTarget: %s, want vdb sdb", got)
	}
	var devices []plugged
	for _, k := range []model.Disk{{Name: "vdb", Bus: "virtio", Serial: "hot-virtio", Tag: "hot1"}, {Name: "sdb", Bus: "scsi", Serial: "hot-scsi", Tag: "hot2"}} {
		x, err := DiskDeviceXML(k, d.host, Options{})
		if err != nil {
			t.Fatal(err)
		}
		devices = append(devices, plugged{"disk", k.Name, DiskAlias(k.Name), x})
	}
	nx, err := NICDeviceXML(model.NIC{MAC: nicMAC, Tag: "hotnic"}, 1, d.host, Options{})
	if err != nil {
		t.Fatal(err)
	}
	devices = append(devices, plugged{"nic", nicMAC, NICAlias(nicMAC, 1), nx})

	both := AffectLive | AffectConfig
	for _, p := range devices {
		t0 := time.Now()
		if err := c.AttachDevice(ctx, in.Name, p.xml, both); err != nil {
			t.Fatalf("attach %s %s: %v", p.kind, p.key, err)
		}
		t.Logf("attach %s %s (live+config): %s", p.kind, p.key, time.Since(t0).Round(time.Millisecond))
		waitEvent(t, c, time.Minute, func(ev Event) bool {
			return ev.Kind == EventDeviceAdded && ev.Domain == in.Name && ev.DeviceAlias == p.alias
		})
	}
	addrs := map[string]string{}
	for _, live := range []bool{true, false} {
		doc, devs := domainDevices(t, ctx, c, in.Name, live)
		compareSeen(t, map[bool]string{true: "live", false: "inactive"}[live], must(parsedSeen(t, doc)), dumpSeen(t, uri, in.Name, live))
		for _, p := range devices {
			var addr, alias string
			switch p.kind {
			case "disk":
				x, ok := devs.Disk(p.key)
				if !ok {
					t.Fatalf("live=%t: attached disk %s not in the XML", live, p.key)
				}
				addr, alias = x.Address, x.Alias
			case "nic":
				x, ok := devs.NIC(p.key)
				if !ok {
					t.Fatalf("live=%t: attached NIC %s not in the XML", live, p.key)
				}
				addr, alias = x.Address, x.Alias
			}
			if alias != p.alias {
				t.Errorf("live=%t: %s %s has alias %q, want %q", live, p.kind, p.key, alias, p.alias)
			}
			t.Logf("live=%t: hot-plugged %s %s at %s", live, p.kind, p.key, addr)
			if prev, ok := addrs[p.key]; ok && prev != addr {
				t.Errorf("%s %s: live address %s, persistent %s", p.kind, p.key, prev, addr)
			}
			addrs[p.key] = addr
		}
	}
	if !pciForm.MatchString(addrs["vdb"]) || !scsiForm.MatchString(addrs["sdb"]) || !pciForm.MatchString(addrs[nicMAC]) {
		t.Errorf("hot-plugged addresses %v do not have the metadata forms", addrs)
	}

	// Detach: the disks by their XML, the NIC by alias. The virtio ones
	// need the guest to release the PCI device; the event says when.
	for _, p := range devices {
		t0 := time.Now()
		if p.kind == "nic" {
			err = c.detachAlias(ctx, in.Name, p.alias, both)
		} else {
			err = c.DetachDevice(ctx, in.Name, p.xml, both)
		}
		if err != nil {
			t.Fatalf("detach %s %s: %v", p.kind, p.key, err)
		}
		waitEvent(t, c, time.Minute, func(ev Event) bool {
			return ev.Kind == EventDeviceRemoved && ev.Domain == in.Name && ev.DeviceAlias == p.alias
		})
		t.Logf("detach %s %s until device-removed: %s", p.kind, p.key, time.Since(t0).Round(time.Millisecond))
	}
	for _, live := range []bool{true, false} {
		_, devs := domainDevices(t, ctx, c, in.Name, live)
		for _, p := range devices {
			_, diskThere := devs.Disk(p.key)
			_, nicThere := devs.NIC(p.key)
			if diskThere || nicThere {
				t.Errorf("live=%t: %s %s still in the XML after detach", live, p.kind, p.key)
			}
		}
		if _, ok := devs.Disk("vda"); !ok {
			t.Errorf("live=%t: vda, never detached, is gone", live)
		}
	}
}

func must[T any](v T, _ *Devices) T { return v }
