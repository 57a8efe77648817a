package controller

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/configdrive"
	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/testenv"
)

// pciOf returns the pci entries of a devices list.
func pciOf(devs []metadata.Device) []metadata.Device {
	var out []metadata.Device
	for _, d := range devs {
		if d.Type == "pci" {
			out = append(out, d)
		}
	}
	return out
}

// A tagged passthrough device reaches the guest's metadata as a pci
// device with the guest address the real libvirtd gave its <hostdev>
// (define only: this machine has no spare PCI device to start a guest
// with): in the published document, on the config drive, in the firmware
// entries rendered from the same tree. An untagged one is not listed;
// nothing of the host side is. A re-apply of the shut-off domain keeps
// the guest address.
func TestLibvirtPCIGuestAddress(t *testing.T) {
	e, uri := realEnv(t)
	withDevices(t, e)
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	spec := "name: " + name + "\ndisks: [{name: vda, size: 8M}]\npci_aliases: [{name: gpu, tag: ml}]\n" +
		"pci_devices: [{address: \"0000:5e:00.0\"}, {address: \"0000:5f:00.0\", tag: scratch, guest_address: \"0000:0a:00.0\"}]\n"
	inst := e.mustApply(spec)

	xml := virshOut(t, uri, "dumpxml", "--inactive", name)
	var claimed string
	for _, p := range inst.Spec.PCIDevices {
		if p.Alias == "gpu" {
			claimed = p.Address
		}
	}
	if claimed == "" {
		t.Fatalf("no claimed device in %+v", inst.Spec.PCIDevices)
	}
	// The guest-side <address> of the claimed device's hostdev.
	re := regexp.MustCompile(`(?s)<hostdev mode='subsystem' type='pci' managed='yes'>\s*<source>\s*<address domain='0x0000' bus='0x` + claimed[5:7] +
		`' slot='0x00' function='0x0'/>\s*</source>\s*<address type='pci' domain='0x([0-9a-f]{4})' bus='0x([0-9a-f]{2})' slot='0x([0-9a-f]{2})' function='0x([0-7])'/>`)
	m := re.FindStringSubmatch(xml)
	if m == nil {
		t.Fatalf("no guest address for the hostdev of %s in:\n%s", claimed, xml)
	}
	guest := m[1] + ":" + m[2] + ":" + m[3] + "." + m[4]
	t.Logf("libvirt placed the hostdev of %s at guest address %s", claimed, guest)
	// The spec's guest address is honoured.
	if !regexp.MustCompile(`(?s)<source>\s*<address domain='0x0000' bus='0x5f' slot='0x00' function='0x0'/>\s*</source>\s*<address type='pci' domain='0x0000' bus='0x0a' slot='0x00' function='0x0'/>`).MatchString(xml) {
		t.Fatalf("the hostdev of 0000:5f:00.0 is not at the spec's guest address 0000:0a:00.0:\n%s", xml)
	}

	// Explicit entries first (the spec's order), then the claimed ones.
	want := []metadata.Device{{Type: "pci", Bus: "pci", Address: "0000:0a:00.0", Tags: []string{"scratch"}}, {Type: "pci", Bus: "pci", Address: guest, Tags: []string{"ml"}}}
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	if got := pciOf(inst.Devices); js(got) != js(want) {
		t.Fatalf("returned pci devices %s, want %s", js(got), js(want))
	}
	if got := pciOf(devicesOf(t, e.st, inst.Spec.UUID)); js(got) != js(want) {
		t.Fatalf("published pci devices %s, want %s", js(got), js(want))
	}
	tree, _, err := configdrive.Read(filepath.Join(e.dir, "instances", name, "disk.config"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"latest", metadata.Epoxy} {
		md, _ := tree.Get("openstack/" + v + "/meta_data.json")
		if !strings.Contains(string(md), `{"type":"pci","bus":"pci","address":"`+guest+`","tags":["ml"]}`) {
			t.Errorf("config drive %s lacks the pci device at %s: %s", v, guest, md)
		}
	}
	if md, _ := tree.Get("openstack/" + metadata.Victoria + "/meta_data.json"); strings.Contains(string(md), `"type":"pci"`) {
		t.Errorf("openstack/%s lists a pci device: %s", metadata.Victoria, md)
	}
	es, err := metadata.FirmwareEntries(tree)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range es {
		if en.Name == metadata.FirmwareDevices && !strings.Contains(string(en.Data), `"address":"`+guest+`"`) {
			t.Errorf("firmware devices entry lacks %s: %s", guest, en.Data)
		}
	}
	for _, p := range tree.Paths() {
		b, _ := tree.Get(p)
		for _, host := range []string{claimed, "0000:5e:00.0", "0000:5f:00.0", "one_time_use", "HW_PCI_ONE_TIME_USE", "gpu"} {
			if strings.Contains(string(b), host) {
				t.Errorf("%s carries %q", p, host)
			}
		}
	}

	// Re-applied (shut off): redefined, the same guest address.
	again := e.mustApply(spec)
	if got := pciOf(again.Devices); js(got) != js(want) {
		t.Fatalf("after a re-apply: %s, want %s", js(got), js(want))
	}
	if err := e.c.Delete(context.Background(), name); err != nil {
		t.Fatal(err)
	}
}
