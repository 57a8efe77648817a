package virt

import (
	"errors"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/model"
)

// Hostdevs are read back by their host (source) address; the guest
// address is the hostdev's own <address>. Non-PCI hostdevs are skipped;
// a malformed address is an error naming the device.
func TestParseHostdevs(t *testing.T) {
	const dom = `<domain type='qemu'><name>d</name><uuid>u</uuid><devices>%s</devices></domain>`
	hostdev := func(src, guest string) string {
		s := `<hostdev mode='subsystem' type='pci' managed='yes'><source><address ` + src + `/></source>`
		if guest != "" {
			s += `<address type='pci' ` + guest + `/>`
		}
		return s + `</hostdev>`
	}
	cases := []struct {
		name    string
		devices string
		want    []HostdevInfo
		err     string
	}{
		{"placed", hostdev(`domain='0x0000' bus='0x3b' slot='0x00' function='0x0'`, `domain='0x0000' bus='0x05' slot='0x00' function='0x0'`),
			[]HostdevInfo{{HostAddress: "0000:3b:00.0", Address: "0000:05:00.0"}}, ""},
		{"not placed", hostdev(`domain='0x0000' bus='0xAF' slot='0x10' function='0x7'`, ""),
			[]HostdevInfo{{HostAddress: "0000:af:10.7"}}, ""},
		{"usb hostdev skipped", `<hostdev mode='subsystem' type='usb'><source><vendor id='0x1234'/></source></hostdev>`, nil, ""},
		{"bad source", hostdev(`domain='0x0000' bus='0x3b' slot='0x40' function='0x0'`, ""), nil, "hostdev: source"},
		{"bad guest address", hostdev(`domain='0x0000' bus='0x3b' slot='0x00' function='0x0'`, `domain='0x0000' bus='0x05' slot='0x00' function='0x9'`), nil, "hostdev 0000:3b:00.0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			devs, err := ParseDevices([]byte(strings.Replace(dom, "%s", tc.devices, 1)))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(devs.Hostdevs) != len(tc.want) {
				t.Fatalf("hostdevs %+v, want %+v", devs.Hostdevs, tc.want)
			}
			for i := range tc.want {
				if devs.Hostdevs[i] != tc.want[i] {
					t.Fatalf("hostdevs %+v, want %+v", devs.Hostdevs, tc.want)
				}
			}
		})
	}

	// Apply fills guest addresses by host address and reports a device
	// the domain lacks.
	devs, err := ParseDevices([]byte(strings.Replace(dom, "%s", hostdev(`domain='0x0000' bus='0x3b' slot='0x00' function='0x0'`, `domain='0x0000' bus='0x05' slot='0x00' function='0x0'`), 1)))
	if err != nil {
		t.Fatal(err)
	}
	in := &model.Instance{PCIDevices: []model.PCIDevice{{Address: "0000:3b:00.0", Tag: "ml"}, {Address: "0000:3c:00.0"}}}
	err = devs.Apply(in)
	var fe model.FieldError
	if !errors.As(err, &fe) || fe.Field != "pci_devices[1]" {
		t.Fatalf("Apply = %v, want a field error on pci_devices[1]", err)
	}
	if in.PCIDevices[0].GuestAddress != "0000:05:00.0" {
		t.Fatalf("guest address %q", in.PCIDevices[0].GuestAddress)
	}
}
