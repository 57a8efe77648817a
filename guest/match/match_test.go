package match_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/guest/internal/fixture"
	"github.com/vmeta/vmeta/guest/match"
	"github.com/vmeta/vmeta/guest/sysfs"
	"github.com/vmeta/vmeta/internal/metadata"
)

// guest is the fixture most cases use: a q35 guest with virtio disks
// (one behind a root port), a virtio-scsi HBA with two disks, an AHCI
// controller with a SATA disk and the config drive cdrom, two NICs and a
// loop device.
func guest(t testing.TB) *sysfs.Inventory {
	f := fixture.New(t)
	f.VirtioBlk([]string{"0000:00:07.0"}, 2, "vda", "disk-vol-24235252-0123456789abcdef")
	f.VirtioBlk([]string{"0000:00:02.1", "0000:02:00.0"}, 3, "vdb", "root-0001")
	f.VirtioBlk([]string{"0000:00:09.0"}, 6, "vdc", "")
	f.SCSI([]string{"0000:00:05.0"}, 1, 6, 0, 0, 0, "sda", "disk-vol-2352423")
	f.SCSI([]string{"0000:00:05.0"}, 1, 6, 0, 2, 0, "sdb", "")
	f.SCSI([]string{"0000:00:05.0"}, 1, 6, 0, 10, 0, "sdd", "")
	f.ATA([]string{"0000:00:1f.2"}, 2, 2, 1, "sdc", "sata-0001")
	f.ATA([]string{"0000:00:1f.2"}, 3, 3, 2, "sr0", "QM00005")
	f.Loop("loop0")
	f.NIC([]string{"0000:00:03.0"}, 0, "enp0s3", "52:54:00:aa:bb:01", 2)
	f.NIC([]string{"0000:00:04.0"}, 4, "enp0s4", "52:54:00:aa:bb:02", 3)
	f.VirtualNIC("lo", "00:00:00:00:00:00", 1)
	inv, err := sysfs.Scanner{Root: f.Root, DevRoot: f.Dev}.Scan()
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func disk(bus, addr, serial string) metadata.Device {
	return metadata.Device{Type: "disk", Bus: bus, Address: addr, Serial: serial, Tags: []string{"t"}}
}

func nic(addr, mac string) metadata.Device {
	return metadata.Device{Type: "nic", Bus: "pci", Address: addr, MAC: mac, Tags: []string{"t"}}
}

func TestRules(t *testing.T) {
	inv := guest(t)
	cases := []struct {
		name   string
		dev    metadata.Device
		status match.Status
		want   string // matched device name, or a substring of the reason
	}{
		// NICs by MAC.
		{"nic by mac", nic("0000:00:03.0", "52:54:00:aa:bb:01"), match.Matched, "enp0s3"},
		{"nic by mac, upper case", nic("none", "52:54:00:AA:BB:02"), match.Matched, "enp0s4"},
		{"nic unknown mac", nic("none", "52:54:00:aa:bb:99"), match.Unmatched, "no NIC with mac 52:54:00:aa:bb:99"},
		{"nic mac and address disagree", nic("0000:00:04.0", "52:54:00:aa:bb:01"), match.Conflict, "different devices"},
		{"virtual NICs are never matched", nic("none", "00:00:00:00:00:00"), match.Unmatched, "no NIC"},

		// Disks by PCI address.
		{"virtio by pci", disk("pci", "0000:00:07.0", ""), match.Matched, "vda"},
		{"virtio behind a root port by its own function", disk("pci", "0000:02:00.0", ""), match.Matched, "vdb"},
		{"the root port itself is no disk's function", disk("pci", "0000:00:02.1", ""), match.Unmatched, "no disk with pci 0000:00:02.1"},
		{"pci and serial agree", disk("pci", "0000:00:09.0", ""), match.Matched, "vdc"},
		{"pci address of a disk with another serial", disk("pci", "0000:02:00.0", "other"), match.Conflict, "does not have serial other"},
		{"pci and serial point at different disks", disk("pci", "0000:00:07.0", "root-0001"), match.Conflict, "different devices"},
		{"pci without a serial the guest can see", disk("pci", "0000:00:09.0", "vol-x"), match.Matched, "vdc"},

		// Serials.
		{"virtio serial truncated to 20 bytes", disk("pci", "none", "disk-vol-24235252-0123456789abcdef"), match.Matched, "vda"},
		{"virtio serial, another tail after 20 bytes", disk("pci", "none", "disk-vol-24235252-01zzzz"), match.Matched, "vda"},
		{"virtio serial prefix shorter than 20 is no match", disk("pci", "none", "disk-vol-2423"), match.Unmatched, "no disk"},
		{"scsi serial from VPD 0x80", disk("scsi", "none", "disk-vol-2352423"), match.Matched, "sda"},
		{"sata serial from VPD 0x80", disk("scsi", "none", "sata-0001"), match.Matched, "sdc"},
		{"unknown serial", disk("scsi", "none", "nope"), match.Unmatched, "no disk with serial nope"},

		// SCSI and SATA by address.
		{"scsi by channel:target:lun", disk("scsi", "0:0:2:0", ""), match.Matched, "sdb"},
		{"scsi address in hex (target 10)", disk("scsi", "0:0:a:0", ""), match.Matched, "sdd"},
		{"scsi address and serial", disk("scsi", "0:0:0:0", "disk-vol-2352423"), match.Matched, "sda"},
		{"sata by AHCI port (unit)", disk("scsi", "0:0:0:1", ""), match.Matched, "sdc"},
		{"sata cdrom port 2", disk("scsi", "0:0:0:2", ""), match.Matched, "sr0"},
		{"scsi 0:0:0:0 is also nothing on SATA port 0", disk("scsi", "0:0:0:0", ""), match.Matched, "sda"},
		{"scsi address of a disk with another serial", disk("scsi", "0:0:2:0", "x"), match.Matched, "sdb"},
		{"scsi address and serial of different disks", disk("scsi", "0:0:2:0", "disk-vol-2352423"), match.Conflict, "different devices"},
		{"scsi nothing there", disk("scsi", "0:0:5:0", ""), match.Unmatched, "no disk with scsi 0:0:5:0"},
		{"scsi bad address", disk("scsi", "0:0:zz:0", ""), match.Unmatched, "not a hex number"},

		// Paths and nothing to go on.
		{"path", metadata.Device{Type: "disk", Bus: "none", Address: "none", Path: "DEV/vdc"}, match.Matched, "vdc"},
		{"no identifiers", metadata.Device{Type: "disk", Bus: "none", Address: "none"}, match.Unmatched, "gives no address, serial or path"},
		{"usb address is not used, serial is", disk("usb", "1:2", "root-0001"), match.Matched, "vdb"},
		{"loop devices are never matched", metadata.Device{Type: "disk", Bus: "none", Path: "DEV/loop0"}, match.Unmatched, "no disk"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := c.dev
			if strings.HasPrefix(d.Path, "DEV/") {
				d.Path = strings.Replace(d.Path, "DEV", devRoot(inv), 1)
			}
			r := match.Devices([]metadata.Device{d}, inv)[0]
			if r.Status != c.status {
				t.Fatalf("status %s (%s), want %s", r.Status, r.Reason, c.status)
			}
			got := r.Reason
			if r.Disk != nil {
				got = r.Disk.Name
			}
			if r.NIC != nil {
				got = r.NIC.Name
			}
			if c.status == match.Matched && got != c.want || c.status != match.Matched && !strings.Contains(got, c.want) {
				t.Errorf("got %q, want %q (by %v, notes %v)", got, c.want, r.By, r.Notes)
			}
		})
	}
}

func devRoot(inv *sysfs.Inventory) string {
	d := inv.Disk("vda").DevNode
	return d[:len(d)-len("/vda")]
}

// TestAmbiguous: never a guess when several devices fit.
func TestAmbiguous(t *testing.T) {
	f := fixture.New(t)
	// Nova volume serials are 36-character UUIDs; two that share their
	// first 20 bytes cannot be told apart on virtio-blk.
	f.VirtioBlk([]string{"0000:00:07.0"}, 2, "vda", "0123456789abcdef0123-aaaa")
	f.VirtioBlk([]string{"0000:00:08.0"}, 3, "vdb", "0123456789abcdef0123-bbbb")
	// Two virtio-scsi HBAs with a disk at 0:0:0 each.
	f.SCSI([]string{"0000:00:05.0"}, 1, 2, 0, 0, 0, "sda", "")
	f.SCSI([]string{"0000:00:06.0"}, 4, 3, 0, 0, 0, "sdb", "")
	// The specification's example: two NICs with one MAC.
	f.NIC([]string{"0000:00:02.0"}, 5, "eth0", "01:22:22:42:22:21", 2)
	f.NIC([]string{"0000:00:03.0"}, 6, "eth1", "01:22:22:42:22:21", 3)
	inv, err := sysfs.Scanner{Root: f.Root, DevRoot: f.Dev}.Scan()
	if err != nil {
		t.Fatal(err)
	}
	res := match.Devices([]metadata.Device{
		disk("pci", "none", "0123456789abcdef0123-cccc"),
		disk("pci", "0000:00:08.0", "0123456789abcdef0123-cccc"),
		disk("scsi", "0:0:0:0", ""),
		{Type: "nic", Bus: "none", Address: "none", MAC: "01:22:22:42:22:21"},
		nic("0000:00:03.0", "01:22:22:42:22:21"),
	}, inv)
	want := []string{"ambiguous vda, vdb", "matched vdb", "ambiguous sda, sdb", "ambiguous eth0, eth1", "matched eth1"}
	for i, r := range res {
		got := string(r.Status)
		switch {
		case r.Disk != nil:
			got += " " + r.Disk.Name
		case r.NIC != nil:
			got += " " + r.NIC.Name
		default:
			got += " " + r.Reason
		}
		if !strings.HasPrefix(got, strings.Fields(want[i])[0]) || !strings.Contains(got, strings.SplitN(want[i], " ", 2)[1]) {
			t.Errorf("entry %d: %s, want %s", i, got, want[i])
		}
	}
}

func TestShares(t *testing.T) {
	f := fixture.New(t)
	f.VirtioFS([]string{"0000:00:08.0"}, 5, "shared-data", true)
	inv, err := sysfs.Scanner{Root: f.Root, DevRoot: f.Dev}.Scan()
	if err != nil {
		t.Fatal(err)
	}
	res := match.Devices([]metadata.Device{
		{Type: "share", Bus: "none", Address: "none", Tag: "shared-data"},
		{Type: "share", Bus: "none", Address: "none", Tag: "not-attached"},
	}, inv)
	if res[0].Status != match.Present || res[1].Status != match.Absent {
		t.Errorf("shares: %+v", res)
	}
	old := fixture.New(t)
	old.VirtioFS([]string{"0000:00:08.0"}, 5, "shared-data", false)
	inv, _ = sysfs.Scanner{Root: old.Root, DevRoot: old.Dev}.Scan()
	if r := match.Devices([]metadata.Device{{Type: "share", Tag: "x"}}, inv)[0]; r.Status != match.Unknown || !r.OK() {
		t.Errorf("share on an old kernel: %+v", r)
	}
}

func TestSerialMatches(t *testing.T) {
	long := "disk-vol-24235252-0123456789abcdef"
	for _, c := range []struct {
		t           sysfs.Transport
		guest, meta string
		want        bool
	}{
		{sysfs.TransportVirtio, long[:20], long, true},
		{sysfs.TransportATA, long[:20], long, true},
		{sysfs.TransportSCSI, long[:20], long, false}, // scsi-hd keeps 36
		{sysfs.TransportSCSI, (long + "0123456789")[:36], long + "0123456789", true},
		{sysfs.TransportVirtio, long[:19], long, false},
		{sysfs.TransportNVMe, long[:20], long, false},
		{sysfs.TransportVirtio, "", "", false},
		{sysfs.TransportVirtio, "abc", "abc", true},
	} {
		if got := match.SerialMatches(c.t, c.guest, c.meta); got != c.want {
			t.Errorf("SerialMatches(%s, %q, %q) = %v", c.t, c.guest, c.meta, got)
		}
	}
}

// BenchmarkMatch64 matches 64 metadata entries (32 virtio disks, 16 SCSI
// disks, 16 NICs) against a fixture guest with those devices, scanning
// sysfs each time (what a pass does) and matching alone.
func BenchmarkMatch64(b *testing.B) {
	f := fixture.New(b)
	var devs []metadata.Device
	for i := range 32 {
		pci := fmt.Sprintf("0000:%02x:00.0", i+1)
		serial := fmt.Sprintf("vol-%04d-0123456789abcdef", i)
		f.VirtioBlk([]string{fmt.Sprintf("0000:00:%02x.%d", 2+i/8, i%8), pci}, i, fmt.Sprintf("vd%c%c", 'a'+i/26, 'a'+i%26), serial)
		devs = append(devs, metadata.Device{Type: "disk", Bus: "pci", Address: pci, Serial: serial, Tags: []string{fmt.Sprintf("d%d", i)}})
	}
	for i := range 16 {
		serial := fmt.Sprintf("scsi-%04d", i)
		f.SCSI([]string{"0000:00:1e.0"}, 40, 6, 0, i, 0, fmt.Sprintf("sd%c", 'a'+i), serial)
		devs = append(devs, metadata.Device{Type: "disk", Bus: "scsi", Address: fmt.Sprintf("0:0:%x:0", i), Serial: serial, Tags: []string{fmt.Sprintf("s%d", i)}})
	}
	for i := range 16 {
		mac := fmt.Sprintf("52:54:00:00:01:%02x", i)
		pci := fmt.Sprintf("0000:%02x:00.0", 0x40+i)
		f.NIC([]string{fmt.Sprintf("0000:00:%02x.%d", 0x10+i/8, i%8), pci}, 50+i, fmt.Sprintf("ens%d", i), mac, 2+i)
		devs = append(devs, metadata.Device{Type: "nic", Bus: "pci", Address: pci, MAC: mac, Tags: []string{fmt.Sprintf("n%d", i)}})
	}
	sc := sysfs.Scanner{Root: f.Root, DevRoot: f.Dev}
	inv, err := sc.Scan()
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range match.Devices(devs, inv) {
		if r.Status != match.Matched {
			b.Fatalf("%+v: %s %s", r.Device, r.Status, r.Reason)
		}
	}
	b.Run("scan+match", func(b *testing.B) {
		for b.Loop() {
			inv, err := sc.Scan()
			if err != nil {
				b.Fatal(err)
			}
			match.Devices(devs, inv)
		}
	})
	b.Run("match", func(b *testing.B) {
		for b.Loop() {
			match.Devices(devs, inv)
		}
	})
}
