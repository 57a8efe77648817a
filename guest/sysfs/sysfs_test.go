package sysfs_test

import (
	"reflect"
	"testing"

	"github.com/vmeta/vmeta/guest/internal/fixture"
	"github.com/vmeta/vmeta/guest/sysfs"
)

func TestScan(t *testing.T) {
	f := fixture.New(t)
	vda := f.VirtioBlk([]string{"0000:00:07.0"}, 2, "vda", "disk-vol-24235252-0123456789abcdef")
	f.Partition(vda, "vda1", 1)
	f.Partition(vda, "vda2", 2)
	f.VirtioBlk([]string{"0000:00:02.1", "0000:02:00.0"}, 3, "vdb", "")
	f.SCSI([]string{"0000:00:05.0"}, 1, 6, 0, 2, 0, "sda", "disk-vol-2352423")
	f.ATA([]string{"0000:00:1f.2"}, 3, 3, 2, "sr0", "QM00005")
	f.Loop("loop0")
	f.NIC([]string{"0000:00:03.0"}, 0, "enp0s3", "52:54:00:AA:BB:01", 2)
	f.NIC([]string{"0000:00:02.2", "0000:03:00.0"}, 4, "enp3s0", "52:54:00:aa:bb:02", 3)
	f.VirtualNIC("lo", "00:00:00:00:00:00", 1)
	f.VirtualNIC("virbr0", "52:54:00:00:00:99", 4)
	f.VirtioFS([]string{"0000:00:08.0"}, 5, "shared-data", true)

	inv, err := sysfs.Scanner{Root: f.Root, DevRoot: f.Dev}.Scan()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]sysfs.Disk{}
	for _, d := range inv.Disks {
		byName[d.Name] = d
	}
	if len(byName) != 5 {
		t.Fatalf("disks: %+v", inv.Disks)
	}
	a := byName["vda"]
	if a.Transport != sysfs.TransportVirtio || a.PCIFunction() != "0000:00:07.0" || a.Serial != "disk-vol-24235252-01" ||
		a.DevNode != f.Dev+"/vda" || a.DevPath != "/devices/pci0000:00/0000:00:07.0/virtio2/block/vda" || a.HCTL != nil || a.Virtual {
		t.Errorf("vda: %+v", a)
	}
	if len(a.Partitions) != 2 || a.Partitions[0].Name != "vda1" || a.Partitions[1].Number != 2 || a.Partitions[0].Major != "252" {
		t.Errorf("vda partitions: %+v", a.Partitions)
	}
	if b := byName["vdb"]; !reflect.DeepEqual(b.PCI, []string{"0000:00:02.1", "0000:02:00.0"}) || b.Serial != "" {
		t.Errorf("vdb behind a root port: %+v", b)
	}
	if s := byName["sda"]; s.Transport != sysfs.TransportSCSI || s.HCTL == nil || *s.HCTL != (sysfs.HCTL{Host: 6, Target: 2}) ||
		s.PCIFunction() != "0000:00:05.0" || s.Serial != "disk-vol-2352423" || s.ATAPort != -1 {
		t.Errorf("sda: %+v", s)
	}
	if c := byName["sr0"]; c.Transport != sysfs.TransportATA || c.ATAPort != 2 || c.HCTL.Host != 2 || c.Serial != "QM00005" {
		t.Errorf("sr0: %+v", c)
	}
	if l := byName["loop0"]; !l.Virtual {
		t.Errorf("loop0 not virtual: %+v", l)
	}
	if len(inv.NICs) != 2 {
		t.Fatalf("NICs (virtual ones must be skipped): %+v", inv.NICs)
	}
	if n := inv.NICs[0]; n.Name != "enp0s3" || n.MAC != "52:54:00:aa:bb:01" || n.Index != 2 || n.PCIFunction() != "0000:00:03.0" {
		t.Errorf("enp0s3: %+v", n)
	}
	if n := inv.NICs[1]; n.PCIFunction() != "0000:03:00.0" {
		t.Errorf("enp3s0: %+v", n)
	}
	if !inv.VirtioFS.TagsKnown || !inv.VirtioFS.Tags["shared-data"] || inv.VirtioFS.Devices != 1 {
		t.Errorf("virtiofs: %+v", inv.VirtioFS)
	}
}

func TestScanOldKernelVirtioFS(t *testing.T) {
	f := fixture.New(t)
	f.VirtioFS([]string{"0000:00:08.0"}, 5, "shared-data", false)
	inv, err := sysfs.Scanner{Root: f.Root, DevRoot: f.Dev}.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if inv.VirtioFS.TagsKnown || inv.VirtioFS.Devices != 1 {
		t.Errorf("virtiofs on a kernel without /sys/fs/virtiofs: %+v", inv.VirtioFS)
	}
}

func TestScanEmptyRoot(t *testing.T) {
	inv, err := sysfs.Scanner{Root: t.TempDir()}.Scan()
	if err != nil || len(inv.Disks) != 0 || len(inv.NICs) != 0 {
		t.Fatalf("empty sysfs: %+v %v", inv, err)
	}
}

func TestParseVPD80(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
	}{
		{fixture.VPD80("disk-vol-1"), "disk-vol-1"},
		{"\x00\x80\x00\x14QM00005             ", "QM00005"}, // ATA: space-padded 20 bytes
		{"\x00\x80\x00\x08abc\x00\x00\x00\x00\x00", "abc"},
		{"\x00\x80\x00\xffshort", "short"}, // length beyond the data
		{"\x00\x83\x00\x04abcd", ""},       // another page
		{"\x00\x80", ""},
		{"", ""},
	} {
		if got := sysfs.ParseVPD80([]byte(c.in)); got != c.want {
			t.Errorf("ParseVPD80(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
