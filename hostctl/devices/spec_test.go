package devices

import (
	"strings"
	"testing"
)

func TestParseSpec(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []Entry
		err      string // substring; "" = valid
	}{
		{name: "yaml object", in: `
devices:
  - address: "0000:3b:00.*"
    alias: gpu
    one_time_use: true
  - vendor_id: "0x144D"
    product_id: a80a
    alias: nvme
    live_migratable: true
`, want: []Entry{
			{Address: "0000:3b:00.*", Alias: "gpu", OneTimeUse: true},
			{VendorID: "144d", ProductID: "a80a", Alias: "nvme", LiveMigratable: true},
		}},
		{name: "json list", in: `[{"address":"0000:AF:00.0","alias":"nic"}]`, want: []Entry{{Address: "0000:af:00.0", Alias: "nic"}}},
		{name: "empty file", in: ``, want: nil},
		{name: "disjoint globs", in: `[{"address":"0000:3b:*.0","alias":"a"},{"address":"0000:3c:*.0","alias":"b"}]`,
			want: []Entry{{Address: "0000:3b:*.0", Alias: "a"}, {Address: "0000:3c:*.0", Alias: "b"}}},
		{name: "same address, disjoint vendors", in: `[{"address":"0000:3b:00.0","vendor_id":"10de","alias":"a"},{"address":"0000:3b:00.0","vendor_id":"8086","alias":"b"}]`,
			want: []Entry{{Address: "0000:3b:00.0", VendorID: "10de", Alias: "a"}, {Address: "0000:3b:00.0", VendorID: "8086", Alias: "b"}}},

		{name: "not yaml", in: "devices: [", err: "(file): not YAML or JSON"},
		{name: "unknown field", in: `[{"address":"0000:3b:00.0","alias":"a","one_time":true}]`, err: `unknown field "one_time"`},
		{name: "wrong type", in: `[{"address":"0000:3b:00.0","alias":"a","one_time_use":"yes"}]`, err: "one_time_use"},
		{name: "not a PCI address", in: `[{"address":"3b:00.0","alias":"a"}]`, err: `devices[0].address: "3b:00.0": is not a PCI address`},
		{name: "function 8", in: `[{"address":"0000:3b:00.8","alias":"a"}]`, err: `devices[0].address`},
		{name: "bad glob", in: `[{"address":"0000:3b:00.[","alias":"a"}]`, err: `devices[0].address: "0000:3b:00.[": bad glob`},
		{name: "glob of the wrong shape", in: `[{"address":"0000:*","alias":"a"}]`, err: `devices[0].address: "0000:*": is not a PCI address glob`},
		{name: "matches everything", in: `[{"alias":"a"}]`, err: `devices[0].address: an entry needs address, vendor_id or product_id`},
		{name: "bad vendor", in: `[{"vendor_id":"10dex","alias":"a"}]`, err: `devices[0].vendor_id: "10dex": must be four hex digits`},
		{name: "bad product", in: `[{"vendor_id":"10de","product_id":"zz","alias":"a"}]`, err: `devices[0].product_id: "zz"`},
		{name: "no alias", in: `[{"address":"0000:3b:00.0"}]`, err: `devices[0].alias: "": must be 1 to 64`},
		{name: "bad alias", in: `[{"address":"0000:3b:00.0","alias":"GPU!"}]`, err: `devices[0].alias: "GPU!"`},
		{name: "duplicate", in: `[{"address":"0000:3b:00.0","alias":"a"},{"address":"0000:3b:00.0","alias":"b"}]`, err: `devices[1].address: "0000:3b:00.0": duplicate of devices[0]`},
		{name: "address inside a glob", in: `[{"address":"0000:3b:*.*","alias":"a"},{"address":"0000:3b:00.0","alias":"b"}]`, err: "devices[1].address: \"0000:3b:00.0\": overlaps devices[0]"},
		{name: "vendor entries overlap", in: `[{"vendor_id":"10de","alias":"a"},{"vendor_id":"10de","product_id":"20b5","alias":"b"}]`, err: "devices[1].vendor_id: \"10de\": overlaps devices[0] (vendor_id 10de)"},
		{name: "several errors", in: `[{"address":"x","alias":"a"},{"address":"0000:3b:00.0","alias":""}]`, err: `devices[0].address: "x": is not a PCI address dddd:bb:ss.f (lower-case hex) or a glob of one; devices[1].alias`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseSpec([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseSpec error = %v, want one containing %q", err, tc.err)
				}
				if !strings.HasPrefix(err.Error(), "invalid device spec") {
					t.Errorf("error %q does not say it is the device spec", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSpec: %v", err)
			}
			if len(s.Entries) != len(tc.want) {
				t.Fatalf("entries = %+v, want %+v", s.Entries, tc.want)
			}
			for i := range tc.want {
				if s.Entries[i] != tc.want[i] {
					t.Errorf("entry %d = %+v, want %+v", i, s.Entries[i], tc.want[i])
				}
			}
		})
	}
}

// Two globs that both match a device are found against the devices.
func TestSpecMatchOverlap(t *testing.T) {
	found, err := Discover(writeSysfs(t, gpuServer))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseSpec([]byte(`[{"address":"0000:3b:*.0","alias":"a"},{"address":"0000:*:00.0","vendor_id":"10de","alias":"b"}]`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Match(found)
	if err == nil || !strings.Contains(err.Error(), `devices[1]: "0000:3b:00.0": matches the same device as devices[0]`) {
		t.Fatalf("Match = %v, want the overlap named", err)
	}
}

func TestDiscover(t *testing.T) {
	found, err := Discover(writeSysfs(t, gpuServer))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range found {
		got = append(got, f.Address+" "+f.VendorID+":"+f.ProductID+" "+f.Class)
		if f.Address == "0000:af:00.0" && !f.PF {
			t.Errorf("the ConnectX PF is not marked PF")
		}
	}
	want := []string{ // no bridge, no VFs
		"0000:3b:00.0 10de:20b5 030200",
		"0000:3c:00.0 10de:20b5 030200",
		"0000:5e:00.0 144d:a80a 010802",
		"0000:5f:00.0 144d:a80a 010802",
		"0000:af:00.0 15b3:101d 020000",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Discover =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	found, err = Discover(writeSysfs(t, thisMachine))
	if err != nil || len(found) != 5 {
		t.Fatalf("Discover(this machine's layout) = %v, %v; want the 5 non-bridge devices", found, err)
	}
	if _, err := Discover(t.TempDir()); err == nil {
		t.Fatalf("Discover of a tree without bus/pci: no error")
	}
}

// The real /sys of the machine the tests run on.
func TestDiscoverRealSysfs(t *testing.T) {
	found, err := Discover("/sys")
	if err != nil {
		t.Fatalf("Discover(/sys): %v", err)
	}
	t.Logf("%d PCI devices in /sys (bridges and VFs left out)", len(found))
	for _, f := range found {
		if len(f.VendorID) != 4 || len(f.ProductID) != 4 || len(f.Class) != 6 {
			t.Errorf("device %+v: ids not as sysfs has them", f)
		}
	}
}

func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{
		`[{"address":"0000:3b:00.*","alias":"gpu","one_time_use":true}]`,
		"devices:\n - vendor_id: 10de\n   alias: x\n",
		`{"devices":[{"address":"0000:3b:*.0","alias":"a"},{"address":"0000:3c:[0-1]0:00.0","alias":"b"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSpec(data)
		if err != nil {
			if s != nil {
				t.Fatalf("spec and error both returned")
			}
			return
		}
		for _, e := range s.Entries {
			if !aliasRe.MatchString(e.Alias) {
				t.Fatalf("accepted alias %q", e.Alias)
			}
			if e.Address == "" && e.VendorID == "" && e.ProductID == "" {
				t.Fatalf("accepted an entry matching everything")
			}
		}
	})
}
