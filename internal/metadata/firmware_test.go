package metadata_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/schema"
)

func TestCheckFirmwareName(t *testing.T) {
	long := "opt/io.github.vmeta/" + strings.Repeat("x", metadata.MaxFirmwareName-len("opt/io.github.vmeta/"))
	for _, tc := range []struct {
		name, in, want string // want: "" for valid, else a part of the error
	}{
		{"devices", metadata.FirmwareDevices, ""},
		{"uuid", metadata.FirmwareUUID, ""},
		{"revision", metadata.FirmwareRevision, ""},
		{"exactly the limit", long, ""},
		{"one byte over the limit", long + "y", "56 bytes, more than QEMU's limit of 55"},
		{"not under opt", "etc/io.github.vmeta/devices", `must start with "opt/"`},
		{"no file name", "opt/io.github.vmeta", `opt/<reverse-domain>/<name>`},
		{"not a reverse domain", "opt/vmeta/devices", "not a reverse domain name"},
		{"empty component", "opt/io.github.vmeta//devices", "empty"},
		{"dot dot", "opt/io.github.vmeta/../devices", `".."`},
		{"space", "opt/io.github.vmeta/my devices", "not printable ASCII"},
		{"NUL", "opt/io.github.vmeta/dev\x00", "0x00"},
		{"non-ASCII", "opt/io.github.vmeta/dévices", "not printable ASCII"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := metadata.CheckFirmwareName(tc.in)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("CheckFirmwareName(%q) = %v, want nil", tc.in, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("CheckFirmwareName(%q) = %v, want an error containing %q", tc.in, err, tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), strconv.Quote(tc.in)):
				t.Fatalf("error %q does not name the value", err)
			}
		})
	}
}

func TestFirmwareEntries(t *testing.T) {
	in := richInstance(t)
	opts := deterministic()
	opts.Revision = 42
	tr, err := metadata.Render(in, opts)
	if err != nil {
		t.Fatal(err)
	}
	// The revision is in latest only; the dated versions stay Nova's.
	if md := decodeObject(t, tr.Files["openstack/latest/meta_data.json"]); string(md[metadata.RevisionKey]) != "42" {
		t.Errorf("latest meta_data.json: %s = %s, want 42", metadata.RevisionKey, md[metadata.RevisionKey])
	}
	for _, v := range metadata.OpenStackVersions {
		if _, ok := decodeObject(t, tr.Files["openstack/"+v+"/meta_data.json"])[metadata.RevisionKey]; ok {
			t.Errorf("openstack/%s/meta_data.json carries %s", v, metadata.RevisionKey)
		}
	}

	es, err := metadata.FirmwareEntries(tr)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range es {
		got[e.Name] = string(e.Data)
	}
	if len(es) != 3 || got[metadata.FirmwareUUID] != in.UUID+"\n" || got[metadata.FirmwareRevision] != "42\n" {
		t.Fatalf("entries %q", got)
	}
	// The devices entry is the devices list of latest, byte for byte.
	var md struct {
		Devices json.RawMessage `json:"devices"`
	}
	if err := json.Unmarshal(tr.Files["openstack/latest/meta_data.json"], &md); err != nil {
		t.Fatal(err)
	}
	if want := `{"devices":` + string(md.Devices) + "}\n"; got[metadata.FirmwareDevices] != want {
		t.Errorf("devices entry\n%s\nwant\n%s", got[metadata.FirmwareDevices], want)
	}
	if err := schema.ValidateJSON(schema.DevicesV11, []byte(got[metadata.FirmwareDevices])); err != nil {
		t.Errorf("devices entry refused by the schema: %v", err)
	}
	// Nothing secret or personal: no user data, keys, meta or seed.
	for _, e := range es {
		for _, s := range []string{in.UserData, "ssh-ed25519", "role", "random_seed", in.Hostname} {
			if s != "" && bytes.Contains(e.Data, []byte(s)) {
				t.Errorf("entry %s carries %q", e.Name, s)
			}
		}
	}

	// A tree rendered without a revision has no firmware entries.
	if _, err := metadata.FirmwareEntries(render(t, in)); err == nil || !strings.Contains(err.Error(), metadata.RevisionKey) {
		t.Errorf("FirmwareEntries without a revision: %v", err)
	}
	// Neither has a tree whose devices fail the schema.
	bad := &metadata.Tree{Files: map[string][]byte{"openstack/latest/meta_data.json": []byte(
		`{"uuid":"u","vmeta_revision":3,"devices":[{"type":"nic","bus":"pci","address":"not-an-address"}]}`)}}
	if _, err := metadata.FirmwareEntries(bad); err == nil || !strings.Contains(err.Error(), "/devices/0") {
		t.Errorf("FirmwareEntries with an invalid devices list: %v", err)
	}
	if _, err := metadata.Render(in, metadata.Options{Revision: -1}); err == nil {
		t.Error("Render with a negative revision: no error")
	}
}

func TestParseFirmwareRevision(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"7\n", 7, ""},
		{"1234567\n", 1234567, ""},
		{"", 0, "empty"},
		{"12", 0, "truncated"},
		{"0\n", 0, "not a positive"},
		{"-3\n", 0, "not a positive"},
		{"007\n", 0, "not a positive"},
		{"7\n\n", 0, "more than one line"},
		{"x\n", 0, "not a positive"},
		{"99999999999999999999\n", 0, "not a positive"},
	} {
		got, err := metadata.ParseFirmwareRevision([]byte(tc.in))
		if tc.err == "" && (err != nil || got != tc.want) || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParseFirmwareRevision(%q) = %d, %v; want %d, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func FuzzParseFirmwareRevision(f *testing.F) {
	for _, s := range []string{"7\n", "", "12", "0\n", "18446744073709551616\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := metadata.ParseFirmwareRevision(b)
		if err != nil {
			return
		}
		if n <= 0 || !bytes.HasSuffix(b, []byte("\n")) {
			t.Fatalf("accepted %q as %d", b, n)
		}
	})
}
