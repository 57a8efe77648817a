package metadata_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
)

// TestGoldenPCI renders testdata/pci/spec.yaml and compares the devices
// every transport carries — latest and 2025-04-04 (HTTP and config
// drive, the same files) and the firmware devices entry, all from the one
// rendered tree — with testdata/pci/*.golden; the newest version before
// 2025-04-04 lists no pci device. No transport carries anything of the
// host side (host addresses, one-time use, aliases).
func TestGoldenPCI(t *testing.T) {
	spec, err := os.ReadFile(filepath.Join("testdata", "pci", "spec.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := model.ParseSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	opts := deterministic()
	opts.Revision = 3
	tr, err := metadata.Render(in, opts)
	if err != nil {
		t.Fatal(err)
	}
	devicesOf := func(path string) []byte {
		t.Helper()
		var md struct {
			Devices json.RawMessage `json:"devices"`
		}
		b, ok := tr.Files[path]
		if !ok {
			t.Fatalf("no %s", path)
		}
		if err := json.Unmarshal(b, &md); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := json.Indent(&out, md.Devices, "", " "); err != nil {
			t.Fatal(err)
		}
		return append(out.Bytes(), '\n')
	}
	es, err := metadata.FirmwareEntries(tr)
	if err != nil {
		t.Fatal(err)
	}
	var fw []byte
	for _, e := range es {
		if e.Name == metadata.FirmwareDevices {
			fw = e.Data
		}
	}
	drive := map[string][]byte{}
	for _, f := range tr.ConfigDriveFiles() {
		drive[f.Path] = f.Data
	}
	got := map[string][]byte{
		"latest.golden":     devicesOf("openstack/latest/meta_data.json"),
		"2025-04-04.golden": devicesOf("openstack/" + metadata.Epoxy + "/meta_data.json"),
		"2020-10-14.golden": devicesOf("openstack/" + metadata.Victoria + "/meta_data.json"),
		"firmware.golden":   fw,
	}
	for name, b := range got {
		p := filepath.Join("testdata", "pci", name)
		if *update {
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("%s: %v (run go test -update)", p, err)
		}
		if !bytes.Equal(b, want) {
			t.Errorf("%s differs:\n got %s\nwant %s", p, b, want)
		}
	}
	if !strings.Contains(string(got["latest.golden"]), `"address": "0000:07:00.0"`) || strings.Contains(string(got["2020-10-14.golden"]), `"type": "pci"`) {
		t.Errorf("unexpected devices: latest %s, 2020-10-14 %s", got["latest.golden"], got["2020-10-14.golden"])
	}
	for _, v := range []string{"latest", metadata.Epoxy} {
		p := "openstack/" + v + "/meta_data.json"
		if d := drive[p]; !bytes.Equal(d, tr.Files[p]) {
			t.Errorf("config drive %s differs from the tree's", p)
		}
	}
	for path, b := range tr.Files {
		for _, host := range []string{"0000:3b:00.0", "0000:5e:00.0", "0000:af:10.7", "one_time_use", "HW_PCI", "nvme", "reserved"} {
			if bytes.Contains(b, []byte(host)) {
				t.Errorf("%s carries %q", path, host)
			}
		}
	}
}
