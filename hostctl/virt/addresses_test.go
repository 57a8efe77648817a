package virt

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/model"
)

// testdata/live-domain.xml is the live XML of a TestDomainAddresses domain
// as libvirt 9.0 wrote it (virsh dumpxml of the running domain), kept
// fixed: the expectations below are its values.
func liveDomainXML(t testing.TB) []byte {
	b, err := os.ReadFile(filepath.Join("testdata", "live-domain.xml"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseDevicesLiveXML(t *testing.T) {
	devs, err := ParseDevices(liveDomainXML(t))
	if err != nil {
		t.Fatal(err)
	}
	ahci, scsi := "0000:00:1f.2", "0000:04:00.0"
	wantDisks := []DiskInfo{
		{Target: "vda", Bus: "virtio", Device: "disk", Alias: "ua-disk-vda", Serial: "root-0001", MetadataBus: "pci", Address: "0000:06:00.0"},
		{Target: "vdb", Bus: "virtio", Device: "disk", Alias: "ua-disk-vdb", Serial: "12345678901234567890", MetadataBus: "pci", Address: "0000:07:00.0"},
		{Target: "sda", Bus: "scsi", Device: "disk", Alias: "ua-disk-sda", Serial: "disk-vol-2352423", MetadataBus: "scsi", Address: "0:0:0:0",
			Drive: &DriveAddress{0, 0, 0, 0}, ControllerAddress: scsi},
		{Target: "sdb", Bus: "sata", Device: "disk", Alias: "ua-disk-sdb", Serial: "sata-0001", MetadataBus: "scsi", Address: "0:0:0:1",
			Drive: &DriveAddress{0, 0, 0, 1}, ControllerAddress: ahci},
		{Target: "sdc", Bus: "sata", Device: "cdrom", Alias: ConfigDriveAlias, MetadataBus: "scsi", Address: "0:0:0:2",
			Drive: &DriveAddress{0, 0, 0, 2}, ControllerAddress: ahci},
	}
	if len(devs.Disks) != len(wantDisks) {
		t.Fatalf("%d disks, want %d: %+v", len(devs.Disks), len(wantDisks), devs.Disks)
	}
	for i, want := range wantDisks {
		got := devs.Disks[i]
		got.Source = "" // a temporary directory
		if !reflect.DeepEqual(got, want) {
			t.Errorf("disk %d:\n got %+v\nwant %+v", i, got, want)
		}
	}
	wantNICs := []NICInfo{
		{MAC: "52:54:00:c5:f5:2d", Alias: "ua-nic-525400c5f52d", Network: "default", Model: "virtio", MetadataBus: "pci", Address: "0000:02:00.0"},
		{MAC: "52:54:00:92:a9:77", Alias: "ua-nic-1", Network: "default", Model: "virtio", MetadataBus: "pci", Address: "0000:03:00.0"},
	}
	if !reflect.DeepEqual(devs.NICs, wantNICs) {
		t.Errorf("NICs:\n got %+v\nwant %+v", devs.NICs, wantNICs)
	}
	if len(devs.Shares) != 1 || devs.Shares[0].Tag != "shared-data" || devs.Shares[0].Alias != "ua-fs-shared-data" || devs.Shares[0].Address != "0000:01:00.0" {
		t.Errorf("shares: %+v", devs.Shares)
	}
	if !strings.HasPrefix(devs.Name, "vmeta-test-") || devs.UUID == "" {
		t.Errorf("name %q uuid %q", devs.Name, devs.UUID)
	}
	if got := devs.FreeTarget("scsi"); got != "sdd" {
		t.Errorf("FreeTarget(scsi) = %q, want sdd", got)
	}
	if got := devs.FreeTarget("virtio"); got != "vdc" {
		t.Errorf("FreeTarget(virtio) = %q, want vdc", got)
	}
}

func TestApply(t *testing.T) {
	devs, err := ParseDevices(liveDomainXML(t))
	if err != nil {
		t.Fatal(err)
	}
	in := &model.Instance{
		Disks: []model.Disk{
			{Name: "sdb", Bus: "sata", Tag: "archive"},
			{Name: "vda", Bus: "virtio", Address: "0000:00:09.0"}, // the spec's guess is overwritten
			{Name: "sda", Bus: "scsi"},
		},
		NICs: []model.NIC{
			{Tag: "second"}, // index 0, but the XML's alias is ua-nic-1: no match by alias
			{Tag: "by-alias"},
			{MAC: "52:54:00:C5:F5:2D", Tag: "by-mac"},
		},
		Shares: []model.Share{{ShareID: "s1", Tag: "shared-data"}},
	}
	err = devs.Apply(in)
	// nics[0] has no MAC and alias ua-nic-0 is not in the XML.
	if !hasFieldError(err, "nics[0]") {
		t.Errorf("Apply error %v lacks nics[0]", err)
	}
	if d := in.Disks[0]; d.Address != "0:0:0:1" || d.Serial != "sata-0001" {
		t.Errorf("sdb: %+v", d)
	}
	if d := in.Disks[1]; d.Address != "0000:06:00.0" || d.Serial != "root-0001" {
		t.Errorf("vda: %+v", d)
	}
	if d := in.Disks[2]; d.Address != "0:0:0:0" {
		t.Errorf("sda: %+v", d)
	}
	if n := in.NICs[1]; n.MAC != "52:54:00:92:a9:77" || n.Address != "0000:03:00.0" || n.Bus != "pci" {
		t.Errorf("nics[1] (by alias): %+v", n)
	}
	if n := in.NICs[2]; n.MAC != "52:54:00:c5:f5:2d" || n.Address != "0000:02:00.0" {
		t.Errorf("nics[2] (by MAC): %+v", n)
	}

	missing := &model.Instance{
		Disks:  []model.Disk{{Name: "vdz"}},
		NICs:   []model.NIC{{MAC: "52:54:00:00:00:01"}},
		Shares: []model.Share{{ShareID: "gone"}},
	}
	err = devs.Apply(missing)
	for _, f := range []string{"disks[0]", "nics[0]", "shares[0]"} {
		if !hasFieldError(err, f) {
			t.Errorf("Apply of absent devices: %v lacks %s", err, f)
		}
	}
}

func TestParseDevicesForms(t *testing.T) {
	doc := `<domain type='qemu'><name>x</name><devices>
  <disk type='file' device='disk'><target dev='hda' bus='ide'/><address type='drive' controller='0' bus='1' target='0' unit='1'/></disk>
  <disk type='file' device='disk'><target dev='sdq' bus='scsi'/><address type='drive' controller='2' bus='0' target='10' unit='255'/></disk>
  <disk type='file' device='disk'><target dev='sdr' bus='usb'/><address type='usb' bus='0' port='3'/></disk>
  <disk type='file' device='disk'><target dev='sds' bus='usb'/><address type='usb' bus='0' port='1.2'/></disk>
  <disk type='block' device='disk'><source dev='/dev/mapper/x'/><target dev='vdc' bus='virtio'/><address type='pci' domain='0x0001' bus='0xff' slot='0x1f' function='0x7'/></disk>
  <disk type='file' device='disk'><target dev='vdd' bus='virtio'/></disk>
  <filesystem type='mount'><driver type='path'/><target dir='not-virtiofs'/></filesystem>
</devices></domain>`
	devs, err := ParseDevices([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"hda": "ide 1:1", "sdq": "scsi 2:0:a:ff", "sdr": "usb 0:3", "sds": "usb ", "vdc": "pci 0001:ff:1f.7", "vdd": "pci "}
	for _, d := range devs.Disks {
		if got := d.MetadataBus + " " + d.Address; got != want[d.Target] {
			t.Errorf("%s: %q, want %q", d.Target, got, want[d.Target])
		}
	}
	if d, _ := devs.Disk("vdc"); d.Source != "/dev/mapper/x" {
		t.Errorf("block source %q", d.Source)
	}
	if len(devs.Shares) != 0 {
		t.Errorf("a non-virtiofs filesystem was taken for a share: %+v", devs.Shares)
	}

	for _, bad := range []string{
		`<domain><devices><disk><target dev='vda' bus='virtio'/><address type='pci' domain='0x0000' bus='0x100' slot='0x00' function='0x0'/></disk></devices></domain>`,
		`<domain><devices><disk><target dev='vda' bus='virtio'/><address type='pci' domain='0x0000' bus='0x00' slot='0x20' function='0x0'/></disk></devices></domain>`,
		`<domain><devices><disk><target dev='sda' bus='scsi'/><address type='drive' controller='x' bus='0' target='0' unit='0'/></disk></devices></domain>`,
		`<domain><devices><interface type='network'><address type='drive' controller='0'/></interface></devices></domain>`,
		`<domain><devices><disk><target dev='sda' bus='scsi'/><address type='ccw'/></disk></devices></domain>`,
		`<domain`,
	} {
		if _, err := ParseDevices([]byte(bad)); err == nil {
			t.Errorf("ParseDevices accepted %s", bad)
		}
	}
}

// BenchmarkParseAddresses parses a real live domain XML (4 disks, the
// config drive, 2 NICs, a share, 13 PCI controllers).
func BenchmarkParseAddresses(b *testing.B) {
	doc := liveDomainXML(b)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseDevices(doc); err != nil {
			b.Fatal(err)
		}
	}
}
