package virt

import (
	"slices"
	"strings"
	"testing"
)

// TestBuildDomainFirmware: the domain BuildDomain makes names the host's
// fw_cfg entries (files that need not exist yet: the firmware part writes
// them once the publish has rendered them) in the order given, as
// FirmwareFiles and SetFirmware read them; an entry outside the data
// directory or with a bad name is refused, naming it.
func TestBuildDomainFirmware(t *testing.T) {
	host := fixtureHost()
	host.Firmware = []FirmwareFile{
		{Name: "opt/io.github.vmeta/devices", File: goldenDataDir + "/instances/web1/fw_cfg.1.devices"},
		{Name: "opt/io.github.vmeta/uuid", File: goldenDataDir + "/instances/web1/fw_cfg.1.uuid"},
		{Name: "opt/io.github.vmeta/revision", File: goldenDataDir + "/instances/web1/fw_cfg.1.revision"},
	}
	out, err := BuildDomain(fixtureInstance(), host, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := FirmwareFiles(out)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, host.Firmware) {
		t.Fatalf("entries %+v, want %+v in\n%s", got, host.Firmware, out)
	}
	if rev := FirmwareRevision(got); rev != 1 {
		t.Errorf("revision %d, want 1", rev)
	}
	// What SetFirmware writes over it replaces the block, not adds one.
	again, err := SetFirmware(out, goldenDataDir, host.Firmware[:1])
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := FirmwareFiles(again); len(got) != 1 {
		t.Errorf("after SetFirmware: %+v, want 1 entry", got)
	}
	if smbios := strings.Count(string(out), "<sysinfo type=\"smbios\""); smbios != 1 {
		t.Errorf("%d smbios blocks, want 1", smbios)
	}

	for _, tc := range []struct {
		f    FirmwareFile
		want string
	}{
		{FirmwareFile{Name: "opt/io.github.vmeta/uuid", File: "/etc/passwd"}, "firmware[0].file"},
		{FirmwareFile{Name: "uuid", File: goldenDataDir + "/instances/web1/fw_cfg.1.uuid"}, "firmware[0].name"},
	} {
		host.Firmware = []FirmwareFile{tc.f}
		if _, err := BuildDomain(fixtureInstance(), host, Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("entry %+v: err = %v, want one naming %s", tc.f, err, tc.want)
		}
	}
}
