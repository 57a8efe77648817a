package virt

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/model"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenDataDir does not exist, so ResolveInDataDir leaves the paths as
// they are and the golden files do not depend on this machine.
const goldenDataDir = "/nonexistent-vmeta/data"

func fixtureInstance() *model.Instance {
	return &model.Instance{
		Name: "web1",
		UUID: "6f1c2a3b-4d5e-4f60-8a71-92b3c4d5e6f7",
		Disks: []model.Disk{
			{Name: "vda", Bus: "virtio", Serial: "root-6f1c2a3b", Tag: "root"},
			{Name: "vdb", Bus: "virtio", Serial: "squid-0001", Tag: "squidcache"},
			{Name: "sda", Bus: "scsi", Serial: "disk-vol-2352423", Tag: "oracledb"},
			{Name: "sdb", Bus: "sata", Serial: "sata-0001", Tag: "archive"},
		},
		NICs: []model.NIC{
			{MAC: "52:54:00:12:34:56", Tag: "nfvfunc1"},
			{Tag: "nfvfunc2", Network: "backend", MTU: 1400},
		},
		Shares: []model.Share{{ShareID: "2f6c1d0e-1111-4222-8333-944455556666", Tag: "shared-data", Source: "/srv/shares/data"}},
	}
}

func fixtureHost() Host {
	return Host{
		DataDir: goldenDataDir,
		Disks: map[string]DiskSource{
			"vda": {Path: "instances/web1/vda.qcow2"},
			"vdb": {Path: goldenDataDir + "/instances/web1/vdb.qcow2", SecretUUID: "0a81f5b2-8403-7b23-c8d6-21ccc2f80d6f"},
			"sda": {Path: "instances/web1/sda.raw", Format: "raw"},
			"sdb": {Path: "instances/web1/sdb.qcow2"},
		},
		ConfigDrive: "instances/web1/disk.config",
		SerialLog:   "instances/web1/console.log",
		Networks:    map[string]string{"backend": "vmeta-backend"},
	}
}

func TestBuildDomainGolden(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     func() *model.Instance
		host   func() Host
		opts   Options
		golden string
	}{
		{"default", fixtureInstance, fixtureHost, Options{}, "web1.xml"},
		{"kvm, 2G, 2 vcpus, no hot-plug ports", fixtureInstance, fixtureHost,
			Options{Type: TypeKVM, MemoryMiB: 2048, VCPUs: 2, HotplugPorts: -1, Emulator: "/usr/bin/qemu-system-x86_64"}, "web1-kvm.xml"},
		{"spec addresses", func() *model.Instance {
			in := fixtureInstance()
			in.Disks[0].Address = "0000:00:07.0"
			in.Disks[2].Address = "1:0:2:3"
			in.Disks[3].Address = "0:0:0:4"
			in.NICs[0].Address = "0000:00:08.0"
			in.Shares = nil
			in.PCIDevices = []model.PCIDevice{{Address: "0000:3b:00.1"}}
			return in
		}, func() Host {
			h := fixtureHost()
			h.ConfigDrive, h.SerialLog = "", ""
			return h
		}, Options{}, "web1-addresses.xml"},
		{"direct kernel boot, virtio config drive", fixtureInstance, fixtureHost,
			Options{Kernel: "/boot/vmlinuz", Initrd: "/boot/initrd.img", Cmdline: "console=ttyS0", ConfigDriveBus: "virtio"}, "web1-kernel.xml"},
		{"minimal", func() *model.Instance {
			return &model.Instance{Name: "tiny", UUID: "00000000-0000-4000-8000-000000000001"}
		}, func() Host { return Host{DataDir: goldenDataDir} }, Options{}, "tiny.xml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := BuildDomain(tc.in(), tc.host(), tc.opts)
			if err != nil {
				t.Fatalf("BuildDomain: %v", err)
			}
			checkGolden(t, filepath.Join("testdata", tc.golden), got)
		})
	}
}

func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it); got:\n%s", path, got)
	}
}

// TestBuildDomainContent checks what the golden files are for, so a
// careless -update cannot lose it.
func TestBuildDomainContent(t *testing.T) {
	out, err := BuildDomain(fixtureInstance(), fixtureHost(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{
		`<domain type="qemu">`,
		`<type arch="x86_64" machine="q35">hvm</type>`,
		`<smbios mode="sysinfo"></smbios>`,
		`<entry name="manufacturer">OpenStack Foundation</entry>`,
		`<entry name="product">OpenStack Nova</entry>`,
		`<entry name="serial">6f1c2a3b-4d5e-4f60-8a71-92b3c4d5e6f7</entry>`,
		`<uuid>6f1c2a3b-4d5e-4f60-8a71-92b3c4d5e6f7</uuid>`,
		`<target dev="vda" bus="virtio"></target>`,
		`<serial>disk-vol-2352423</serial>`,
		`<controller type="scsi" index="0" model="virtio-scsi">`,
		`<disk type="file" device="cdrom">`,
		`<source file="/nonexistent-vmeta/data/instances/web1/disk.config">`,
		`<readonly></readonly>`,
		`<source network="default"></source>`,
		`<source network="vmeta-backend"></source>`,
		`<mac address="52:54:00:12:34:56"></mac>`,
		`<driver type="virtiofs"></driver>`,
		`<target dir="shared-data"></target>`,
		`<source type="memfd"></source>`,
		`<access mode="shared"></access>`,
		`<log file="/nonexistent-vmeta/data/instances/web1/console.log" append="on"></log>`,
		`<secret type="passphrase" uuid="0a81f5b2-8403-7b23-c8d6-21ccc2f80d6f">`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("domain XML lacks %s", want)
		}
	}
	// The config drive takes the first sdX the disks leave free.
	if !strings.Contains(s, `<target dev="sdc" bus="sata"></target>`) {
		t.Errorf("config drive is not sdc on sata:\n%s", s)
	}
}

// Without a config drive (spec config_drive: false) the domain has no
// cdrom, and keeps the SMBIOS identity cloud-init's OpenStack datasource
// needs to look for the metadata service instead.
func TestBuildDomainWithoutConfigDrive(t *testing.T) {
	host := fixtureHost()
	host.ConfigDrive = ""
	out, err := BuildDomain(fixtureInstance(), host, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, gone := range []string{`device="cdrom"`, ConfigDriveAlias, "disk.config"} {
		if strings.Contains(s, gone) {
			t.Errorf("domain XML without a config drive has %s:\n%s", gone, s)
		}
	}
	for _, want := range []string{`<entry name="product">OpenStack Nova</entry>`, `<target dev="sdb" bus="sata"></target>`} {
		if !strings.Contains(s, want) {
			t.Errorf("domain XML lacks %s", want)
		}
	}
	devs, err := ParseDevices(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs.Disks {
		if d.Device == "cdrom" {
			t.Errorf("parsed a cdrom: %+v", d)
		}
	}
}

func TestBuildDomainRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(in *model.Instance, h *Host, o *Options)
		field  string // FieldError.Field expected among the errors
		says   string // substring of the message
	}{
		{"ide on q35", func(in *model.Instance, h *Host, o *Options) {
			in.Disks[3].Bus, in.Disks[3].Name = "ide", "hda"
		}, "disks[3].bus", "ide is not available on machine type q35"},
		{"unknown bus", func(in *model.Instance, h *Host, o *Options) { in.Disks[1].Bus = "floppy" }, "disks[1].bus", `unknown bus "floppy"`},
		{"virtio serial over 20", func(in *model.Instance, h *Host, o *Options) {
			in.Disks[0].Serial = "123456789012345678901"
		}, "disks[0].serial", "truncates virtio disk serials to 20"},
		{"sata serial over 20", func(in *model.Instance, h *Host, o *Options) {
			in.Disks[3].Serial = strings.Repeat("s", 21)
		}, "disks[3].serial", "truncates sata disk serials to 20"},
		{"scsi serial over 36", func(in *model.Instance, h *Host, o *Options) {
			in.Disks[2].Serial = strings.Repeat("s", 37)
		}, "disks[2].serial", "truncates scsi disk serials to 36"},
		{"serial with a space", func(in *model.Instance, h *Host, o *Options) { in.Disks[0].Serial = "a b" }, "disks[0].serial", "only ASCII letters"},
		{"name with slash", func(in *model.Instance, h *Host, o *Options) { in.Name = "a/b" }, "name", "contains '/'"},
		{"empty name", func(in *model.Instance, h *Host, o *Options) { in.Name = "" }, "name", "must not be empty"},
		{"name with newline", func(in *model.Instance, h *Host, o *Options) { in.Name = "a\nb" }, "name", "control character"},
		{"name too long", func(in *model.Instance, h *Host, o *Options) { in.Name = strings.Repeat("n", 201) }, "name", "limited to 200"},
		{"name dot-dot", func(in *model.Instance, h *Host, o *Options) { in.Name = ".." }, "name", "reserved"},
		{"no uuid", func(in *model.Instance, h *Host, o *Options) { in.UUID = "" }, "uuid", "required"},
		{"disk path outside data dir", func(in *model.Instance, h *Host, o *Options) {
			h.Disks["vdb"] = DiskSource{Path: "/etc/shadow"}
		}, "disks[1] image", "outside the data directory"},
		{"disk path escaping with ..", func(in *model.Instance, h *Host, o *Options) {
			h.Disks["vdb"] = DiskSource{Path: "instances/../../../etc/passwd"}
		}, "disks[1] image", "outside the data directory"},
		{"config drive outside data dir", func(in *model.Instance, h *Host, o *Options) { h.ConfigDrive = "/tmp/cd.iso" }, "config drive", "outside the data directory"},
		{"serial log outside data dir", func(in *model.Instance, h *Host, o *Options) { h.SerialLog = "/var/log/x.log" }, "serial log", "outside the data directory"},
		{"no image for a disk", func(in *model.Instance, h *Host, o *Options) { delete(h.Disks, "sda") }, "disks[2]", `no image path for disk "sda"`},
		{"duplicate target dev", func(in *model.Instance, h *Host, o *Options) { in.Disks[1].Name = "vda" }, "disks[1].name", `"vda" is already the target of disks[0]`},
		{"config drive dev taken", func(in *model.Instance, h *Host, o *Options) { h.ConfigDriveDev = "sda" }, "config drive", `"sda" is already the target of disks[2]`},
		{"name does not fit bus", func(in *model.Instance, h *Host, o *Options) { in.Disks[0].Name = "sdx" }, "disks[0].name", `start with "vd"`},
		{"bad target name", func(in *model.Instance, h *Host, o *Options) { in.Disks[0].Name = "disk0" }, "disks[0].name", "not a target device name"},
		{"nic bus none", func(in *model.Instance, h *Host, o *Options) { in.NICs[0].Bus = "none" }, "nics[0].bus", "NICs are PCI devices"},
		{"bad MAC", func(in *model.Instance, h *Host, o *Options) { in.NICs[0].MAC = "52:54:00:zz:00:01" }, "nics[0].mac", "not a MAC"},
		{"multicast MAC", func(in *model.Instance, h *Host, o *Options) { in.NICs[0].MAC = "01:00:5e:00:00:01" }, "nics[0].mac", "multicast"},
		{"duplicate MAC", func(in *model.Instance, h *Host, o *Options) { in.NICs[1].MAC = "52:54:00:12:34:56" }, "nics[1].mac", "already the MAC of nics[0]"},
		{"bad PCI address", func(in *model.Instance, h *Host, o *Options) { in.Disks[0].Address = "00:07.0" }, "disks[0].address", "not a PCI address"},
		{"PCI slot out of range", func(in *model.Instance, h *Host, o *Options) { in.NICs[0].Address = "0000:00:20.0" }, "nics[0].address", "above 1f"},
		{"SCSI channel 1", func(in *model.Instance, h *Host, o *Options) { in.Disks[2].Address = "0:1:0:0" }, "disks[2].address", "one channel"},
		{"SATA target", func(in *model.Instance, h *Host, o *Options) { in.Disks[3].Address = "0:0:1:0" }, "disks[3].address", "controller:0:0:port"},
		{"config drive on ide", func(in *model.Instance, h *Host, o *Options) { o.ConfigDriveBus = "ide" }, "config drive", `bus "ide" is not supported`},
		{"share without directory", func(in *model.Instance, h *Host, o *Options) { in.Shares[0].Source = "nfs:/export" }, "shares[0].source", "not an absolute host directory"},
		{"share tag charset", func(in *model.Instance, h *Host, o *Options) { in.Shares[0].Tag = "a b" }, "shares[0].tag", "only ASCII letters"},
		{"duplicate share tag", func(in *model.Instance, h *Host, o *Options) {
			in.Shares = append(in.Shares, model.Share{ShareID: "x", Tag: "shared-data", Source: "/srv/x"})
		}, "shares[1].tag", "already the tag of shares[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, h, o := fixtureInstance(), fixtureHost(), Options{}
			tc.mutate(in, &h, &o)
			out, err := BuildDomain(in, h, o)
			if err == nil {
				t.Fatalf("BuildDomain accepted it:\n%s", out)
			}
			if out != nil {
				t.Errorf("BuildDomain returned XML with its error")
			}
			if !hasFieldError(err, tc.field) {
				t.Errorf("error %q names no field %q", err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
			if !strings.Contains(err.Error(), `build domain "`) {
				t.Errorf("error %q does not name the domain", err)
			}
			if verr := Validate(in, h, o); verr == nil || !hasFieldError(verr, tc.field) {
				t.Errorf("Validate = %v, want the same refusal", verr)
			}
		})
	}
}

// hasFieldError reports whether err carries a model.FieldError for field,
// alone, joined or in a *model.SpecError.
func hasFieldError(err error, field string) bool {
	var walk func(error) bool
	walk = func(err error) bool {
		var fe model.FieldError
		if errors.As(err, &fe) && fe.Field == field {
			return true
		}
		var se *model.SpecError
		if errors.As(err, &se) && slices.ContainsFunc(se.Errors, func(fe model.FieldError) bool { return fe.Field == field }) {
			return true
		}
		if u, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range u.Unwrap() {
				if walk(e) {
					return true
				}
			}
		}
		if u, ok := err.(interface{ Unwrap() error }); ok {
			if e := u.Unwrap(); e != nil {
				return walk(e)
			}
		}
		return false
	}
	return walk(err)
}

func TestBuildDomainReportsEveryProblem(t *testing.T) {
	in, h := fixtureInstance(), fixtureHost()
	in.Name = "a/b"
	in.Disks[0].Serial = strings.Repeat("x", 30)
	in.Disks[3].Bus = "ide"
	h.ConfigDrive = "/elsewhere/cd.iso"
	err := Validate(in, h, Options{})
	for _, f := range []string{"name", "disks[0].serial", "disks[3].bus", "config drive"} {
		if !hasFieldError(err, f) {
			t.Errorf("error %q lacks field %s", err, f)
		}
	}
}

func TestCheckDiskBus(t *testing.T) {
	for _, tc := range []struct {
		machine, bus string
		ok           bool
	}{
		{"q35", "virtio", true}, {"q35", "scsi", true}, {"q35", "sata", true}, {"q35", "usb", true},
		{"q35", "ide", false}, {"pc-q35-7.2", "ide", false},
		{"pc", "ide", true}, {"pc-i440fx-7.2", "ide", true},
		{"q35", "xen", false}, {"q35", "", false},
	} {
		if err := CheckDiskBus(tc.machine, tc.bus); (err == nil) != tc.ok {
			t.Errorf("CheckDiskBus(%q, %q) = %v, want ok=%t", tc.machine, tc.bus, err, tc.ok)
		}
	}
}

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"web1", true}, {"vmeta-test-0a1b2c3d", true}, {"ünïcode", true}, {"with space", true},
		{strings.Repeat("n", MaxNameLength), true},
		{"", false}, {"a/b", false}, {"/", false}, {".", false}, {"..", false}, {"a\nb", false},
		{"tab\there", false}, {"nul\x00", false}, {"\xff", false}, {strings.Repeat("n", MaxNameLength+1), false},
	} {
		if err := ValidateName(tc.name); (err == nil) != tc.ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%t", tc.name, err, tc.ok)
		}
	}
}

func TestResolveInDataDir(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "data")
	outside := filepath.Join(root, "outside")
	for _, d := range []string{filepath.Join(data, "instances", "vm1"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustLink := func(target, link string) {
		t.Helper()
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	mustLink(outside, filepath.Join(data, "escape"))                            // dir link out
	mustLink("/etc/passwd", filepath.Join(data, "instances", "vm1", "pw"))      // file link out
	mustLink(filepath.Join(data, "instances"), filepath.Join(data, "inside"))   // link that stays in
	mustLink(filepath.Join(outside, "nothing"), filepath.Join(data, "dangles")) // dangling link
	// A data directory reached through a symbolic link still works.
	dataLink := filepath.Join(root, "datalink")
	mustLink(data, dataLink)

	for _, tc := range []struct {
		dataDir, p string
		want       string // resolved path, "" when refused
		says       string
	}{
		{data, "instances/vm1/vda.qcow2", filepath.Join(data, "instances/vm1/vda.qcow2"), ""},
		{data, filepath.Join(data, "instances/vm1/vda.qcow2"), filepath.Join(data, "instances/vm1/vda.qcow2"), ""},
		{data, "new/dir/not/yet/made.img", filepath.Join(data, "new/dir/not/yet/made.img"), ""},
		{data, "inside/vm1/x.qcow2", filepath.Join(data, "instances/vm1/x.qcow2"), ""},
		{dataLink, "instances/vm1/vda.qcow2", filepath.Join(data, "instances/vm1/vda.qcow2"), ""},
		{data, "../outside/x.img", "", "outside the data directory"},
		{data, "instances/../../outside/x.img", "", "outside the data directory"},
		{data, filepath.Join(outside, "x.img"), "", "outside the data directory"},
		{data, "/etc/passwd", "", "outside the data directory"},
		{data, "escape/x.img", "", "resolves to"},
		{data, "instances/vm1/pw", "", "resolves to /etc/passwd"},
		{data, "dangles", "", "dangling symbolic link"},
		{data, ".", "", "the data directory itself"},
		{data, "", "", "empty"},
		{"", "x", "", "no data directory"},
		{data + "-sibling", filepath.Join(data, "x"), "", "outside"},
	} {
		got, err := ResolveInDataDir(tc.dataDir, tc.p)
		if tc.want != "" {
			if err != nil || got != tc.want {
				t.Errorf("ResolveInDataDir(%s, %s) = %q, %v; want %q", tc.dataDir, tc.p, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("ResolveInDataDir(%s, %s) = %q, %v; want an error saying %q", tc.dataDir, tc.p, got, err, tc.says)
		}
	}
}

func TestDeviceXML(t *testing.T) {
	in, h := fixtureInstance(), fixtureHost()
	disk, err := DiskDeviceXML(in.Disks[2], h, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<disk type="file" device="disk">`, `<target dev="sda" bus="scsi">`, `<alias name="ua-disk-sda">`, `<serial>disk-vol-2352423</serial>`} {
		if !strings.Contains(string(disk), want) {
			t.Errorf("disk XML lacks %s:\n%s", want, disk)
		}
	}
	nic, err := NICDeviceXML(model.NIC{MAC: "52:54:00:AB:CD:EF"}, 5, h, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<interface type="network">`, `<mac address="52:54:00:ab:cd:ef">`, `<alias name="ua-nic-525400abcdef">`, `<source network="default">`, `<model type="virtio">`} {
		if !strings.Contains(string(nic), want) {
			t.Errorf("NIC XML lacks %s:\n%s", want, nic)
		}
	}
	fs, err := ShareDeviceXML(in.Shares[0], h)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(fs), `<alias name="ua-fs-shared-data">`) {
		t.Errorf("share XML lacks its alias:\n%s", fs)
	}
	if _, err := DiskDeviceXML(model.Disk{Name: "hda", Bus: "ide"}, h, Options{}); err == nil || !strings.Contains(err.Error(), "ide is not available") {
		t.Errorf("DiskDeviceXML(ide) = %v", err)
	}
}

// TestConfigDriveMediaXML: the cdrom element for a medium change names
// the cdrom's target, the new medium (resolved in the data directory),
// read-only, with the config drive's alias; a virtio config drive has no
// medium to change.
func TestConfigDriveMediaXML(t *testing.T) {
	h := fixtureHost()
	h.ConfigDrive, h.ConfigDriveDev = "instances/web1/disk.config.7", "sdc"
	x, err := ConfigDriveMediaXML(h, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<disk type="file" device="cdrom">`, `<target dev="sdc" bus="sata">`,
		`<source file="` + goldenDataDir + `/instances/web1/disk.config.7">`, `<readonly>`, `<alias name="ua-config-drive">`} {
		if !strings.Contains(string(x), want) {
			t.Errorf("medium XML lacks %s:\n%s", want, x)
		}
	}
	if strings.Contains(string(x), "<address") {
		t.Errorf("medium XML carries an address (libvirt keeps the cdrom's):\n%s", x)
	}
	if _, err := ConfigDriveMediaXML(h, Options{ConfigDriveBus: "virtio"}); err == nil || !strings.Contains(err.Error(), "no removable medium") {
		t.Errorf("virtio config drive: %v, want no removable medium", err)
	}
	h.ConfigDriveDev = ""
	if _, err := ConfigDriveMediaXML(h, Options{}); err == nil {
		t.Error("no target: no error")
	}
	h.ConfigDriveDev, h.ConfigDrive = "sdc", "../elsewhere/disk.config"
	if _, err := ConfigDriveMediaXML(h, Options{}); err == nil || !strings.Contains(err.Error(), "outside the data directory") {
		t.Errorf("medium outside the data directory: %v", err)
	}
	if got := (AffectLive | AffectForce).String(); got != "live+force" {
		t.Errorf("Affect string %q", got)
	}
}

func TestParseAlias(t *testing.T) {
	for _, tc := range []struct {
		alias string
		want  DeviceRef
		ok    bool
	}{
		{DiskAlias("vdb"), DeviceRef{Kind: "disk", Disk: "vdb", Index: -1}, true},
		{NICAlias("52:54:00:AA:bb:cc", 3), DeviceRef{Kind: "nic", MAC: "52:54:00:aa:bb:cc", Index: -1}, true},
		{NICAlias("", 3), DeviceRef{Kind: "nic", Index: 3}, true},
		{ShareAlias("data-1"), DeviceRef{Kind: "share", Tag: "data-1", Index: -1}, true},
		{ConfigDriveAlias, DeviceRef{Kind: "config-drive", Index: -1}, true},
		{"virtio-disk0", DeviceRef{Index: -1}, false},
		{"ua-nic-x", DeviceRef{Index: -1}, false},
		{"net0", DeviceRef{Index: -1}, false},
	} {
		got, ok := ParseAlias(tc.alias)
		if ok != tc.ok || got != tc.want {
			t.Errorf("ParseAlias(%q) = %+v, %t; want %+v, %t", tc.alias, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseDomainType(t *testing.T) {
	for in, want := range map[string]DomainType{"": TypeQEMU, "qemu": TypeQEMU, "TCG": TypeQEMU, "kvm": TypeKVM} {
		if got, err := ParseDomainType(in); err != nil || got != want {
			t.Errorf("ParseDomainType(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseDomainType("xen"); err == nil {
		t.Error("ParseDomainType(xen) accepted")
	}
}

func TestGenerateMAC(t *testing.T) {
	m, err := GenerateMAC()
	if err != nil || !model.IsMAC(m) || !strings.HasPrefix(m, "52:54:00:") {
		t.Fatalf("GenerateMAC() = %q, %v", m, err)
	}
}

func TestDiskIndex(t *testing.T) {
	for name, want := range map[string]int{"sda": 0, "sdb": 1, "sdg": 6, "sdh": 7, "sdz": 25, "sdaa": 26, "vdab": 27, "sd": -1, "sdA": -1} {
		if got := diskIndex(name); got != want {
			t.Errorf("diskIndex(%q) = %d, want %d", name, got, want)
		}
	}
}

func BenchmarkBuildDomainXML(b *testing.B) {
	in, h := fixtureInstance(), fixtureHost() // 4 disks, 2 NICs, a share, config drive
	b.ReportAllocs()
	for b.Loop() {
		if _, err := BuildDomain(in, h, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
