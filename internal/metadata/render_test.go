package metadata_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// zeros is an endless reader of zero bytes: a deterministic random_seed.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// deterministic returns render options with a random seed of 512 zero bytes.
func deterministic() metadata.Options {
	return metadata.Options{Rand: bytes.NewReader(make([]byte, 512))}
}

func allOpenStack() []string { return append(slices.Clone(metadata.OpenStackVersions), "latest") }
func allEC2() []string       { return append(slices.Clone(metadata.EC2Versions), "latest") }

// atLeast mirrors Nova's _check_os_version for the test tables.
func atLeast(v, min string) bool {
	if v == "latest" {
		v = metadata.OpenStackLatest
	}
	return v >= min
}

func intp(i int) *int { return &i }

// richInstance is a normalized, valid instance using every feature of the
// model that reaches meta_data.json, without devices or dedicated CPUs
// (their empty renderings are part of what the tests check).
func richInstance(t testing.TB) *model.Instance {
	t.Helper()
	in := &model.Instance{
		Name:             "rich",
		UUID:             "0b7d3a52-6c7e-4d7a-9a55-2e1f3c4d5e6f",
		ProjectID:        "proj-1",
		AvailabilityZone: "az1",
		LaunchIndex:      2,
		Flavor:           "m1.tiny",
		Image:            "cirros",
		Addresses:        []string{"10.0.0.5"},
		Meta:             map[string]string{"role": "db"},
		PublicKeys:       []model.PublicKey{{Name: "k1", Data: "ssh-ed25519 AAAA k1@host"}},
		UserData:         "#!/bin/sh\necho hi\n",
		VendorData:       map[string]any{"cloud-init": "#cloud-config\n{}"},
		Files: []model.File{
			{Path: "/etc/motd", Content: "hello\n"},
			{Path: "/etc/issue", Content: "issue\n"},
		},
	}
	in.Normalize()
	if err := in.Validate(); err != nil {
		t.Fatalf("richInstance is invalid: %v", err)
	}
	return in
}

func render(t testing.TB, in *model.Instance) *metadata.Tree {
	t.Helper()
	tr, err := metadata.Render(in, deterministic())
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return tr
}

func decodeObject(t testing.TB, b []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return m
}

func keysOf[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func sorted(s ...string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

// compactJSON re-encodes JSON so that two documents compare by content.
func compactJSON(t testing.TB, s string) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		t.Fatalf("compact %q: %v", s, err)
	}
	return buf.String()
}

func TestMetaDataKeysPerVersion(t *testing.T) {
	full := richInstance(t)
	fullTree := render(t, full)

	bare := &model.Instance{Name: "bare", UUID: "11111111-2222-4333-8444-555555555555"}
	bare.Normalize()
	bareTree := render(t, bare)

	for _, v := range allOpenStack() {
		t.Run(v, func(t *testing.T) {
			versioned := func() []string {
				var ks []string
				if atLeast(v, metadata.Grizzly) {
					ks = append(ks, "random_seed")
				}
				if atLeast(v, metadata.Liberty) {
					ks = append(ks, "project_id")
				}
				if atLeast(v, metadata.NewtonOne) {
					ks = append(ks, "devices")
				}
				if atLeast(v, metadata.Victoria) {
					ks = append(ks, "dedicated_cpus")
				}
				return ks
			}
			base := []string{"uuid", "hostname", "name", "launch_index", "availability_zone"}

			// meta, public_keys and keys appear only when set; files only
			// on the config drive (checked below).
			md := decodeObject(t, fullTree.Files["openstack/"+v+"/meta_data.json"])
			want := sorted(append(append(slices.Clone(base), "meta", "public_keys", "keys"), versioned()...)...)
			if got := keysOf(md); !slices.Equal(got, want) {
				t.Errorf("rich meta_data.json keys = %v, want %v", got, want)
			}
			bmd := decodeObject(t, bareTree.Files["openstack/"+v+"/meta_data.json"])
			want = sorted(append(slices.Clone(base), versioned()...)...)
			if got := keysOf(bmd); !slices.Equal(got, want) {
				t.Errorf("bare meta_data.json keys = %v, want %v", got, want)
			}

			if raw, ok := md["random_seed"]; ok {
				var s string
				if err := json.Unmarshal(raw, &s); err != nil {
					t.Fatal(err)
				}
				seed, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					t.Fatalf("random_seed is not base64: %v", err)
				}
				if len(seed) != 512 {
					t.Errorf("random_seed decodes to %d bytes, want 512", len(seed))
				}
			}
			if raw, ok := md["project_id"]; ok && string(raw) != `"proj-1"` {
				t.Errorf("project_id = %s", raw)
			}
			if raw, ok := bmd["project_id"]; ok && string(raw) != `""` {
				t.Errorf("bare project_id = %s, want \"\"", raw)
			}
			// devices and dedicated_cpus are [] when empty, never null.
			for _, k := range []string{"devices", "dedicated_cpus"} {
				if raw, ok := md[k]; ok && string(raw) != "[]" {
					t.Errorf("%s = %s, want []", k, raw)
				}
			}
			for k, want := range map[string]string{
				"uuid":              `"0b7d3a52-6c7e-4d7a-9a55-2e1f3c4d5e6f"`,
				"hostname":          `"rich.novalocal"`,
				"name":              `"rich"`,
				"launch_index":      `2`,
				"availability_zone": `"az1"`,
				"meta":              `{"role":"db"}`,
				"public_keys":       `{"k1":"ssh-ed25519 AAAA k1@host"}`,
				"keys":              `[{"name":"k1","type":"ssh","data":"ssh-ed25519 AAAA k1@host"}]`,
			} {
				if got := string(md[k]); got != want {
					t.Errorf("%s = %s, want %s", k, got, want)
				}
			}
			// Injected files are listed only in the config drive's variant
			// (Nova never stores them, so its HTTP service has none).
			if _, ok := md["files"]; ok {
				t.Errorf("HTTP meta_data.json lists injected files")
			}
			driveMD := decodeObject(t, fullTree.DriveOnly["openstack/"+v+"/meta_data.json"])
			if got, want := string(driveMD["files"]), `[{"path":"/etc/motd","content_path":"/content/0000"},{"path":"/etc/issue","content_path":"/content/0001"}]`; got != want {
				t.Errorf("drive files = %s, want %s", got, want)
			}
			if got := string(bmd["availability_zone"]); got != `"nova"` {
				t.Errorf("bare availability_zone = %s, want \"nova\"", got)
			}

			// Files per version.
			wantFiles := []string{"meta_data.json", "user_data"}
			if atLeast(v, metadata.Havana) {
				wantFiles = append(wantFiles, "vendor_data.json")
			}
			if atLeast(v, metadata.Liberty) {
				wantFiles = append(wantFiles, "network_data.json")
			}
			if atLeast(v, metadata.NewtonTwo) {
				wantFiles = append(wantFiles, "vendor_data2.json")
			}
			if got := filesIn(fullTree, "openstack/"+v+"/"); !slices.Equal(got, sorted(wantFiles...)) {
				t.Errorf("files of openstack/%s = %v, want %v", v, got, sorted(wantFiles...))
			}
			wantBare := slices.DeleteFunc(slices.Clone(wantFiles), func(s string) bool { return s == "user_data" })
			if got := filesIn(bareTree, "openstack/"+v+"/"); !slices.Equal(got, sorted(wantBare...)) {
				t.Errorf("bare files of openstack/%s = %v, want %v", v, got, sorted(wantBare...))
			}
			if got := string(fullTree.Files["openstack/"+v+"/user_data"]); got != full.UserData {
				t.Errorf("user_data = %q", got)
			}
			if b, ok := fullTree.Get("openstack/" + v + "/vendor_data.json"); ok {
				if got, want := string(b), `{"cloud-init":"#cloud-config\n{}"}`; got != want {
					t.Errorf("vendor_data.json = %s, want %s", got, want)
				}
			}
			if b, ok := fullTree.Get("openstack/" + v + "/vendor_data2.json"); ok {
				if got, want := string(b), `{"static":{"cloud-init":"#cloud-config\n{}"}}`; got != want {
					t.Errorf("vendor_data2.json = %s, want %s", got, want)
				}
			}
			if b, ok := bareTree.Get("openstack/" + v + "/vendor_data2.json"); ok && string(b) != `{"static":{}}` {
				t.Errorf("bare vendor_data2.json = %s", b)
			}
		})
	}

	// Content blobs: openstack/content/NNNN, referenced as /content/NNNN,
	// on the drive only.
	if got := filesIn(fullTree, "openstack/content/"); len(got) != 0 {
		t.Errorf("content blobs served over HTTP: %v", got)
	}
	drive := map[string][]byte{}
	for _, f := range fullTree.ConfigDriveFiles() {
		drive[f.Path] = f.Data
	}
	if got := string(drive["openstack/content/0000"]); got != "hello\n" {
		t.Errorf("content/0000 = %q", got)
	}
	if got := string(drive["openstack/content/0001"]); got != "issue\n" {
		t.Errorf("content/0001 = %q", got)
	}
	if got := filesIn(bareTree, "openstack/content/"); len(got) != 0 {
		t.Errorf("bare instance has content blobs %v", got)
	}
	if got := metadata.ContentPath(7); got != "content/0007" {
		t.Errorf("ContentPath(7) = %q", got)
	}
	// No password is ever part of a tree.
	for _, p := range fullTree.Paths() {
		if strings.HasSuffix(p, "/password") {
			t.Errorf("tree holds %s", p)
		}
	}
	// user-data sits next to meta-data in EC2 only when set.
	if _, ok := bareTree.Get("ec2/latest/user-data"); ok {
		t.Error("bare instance has ec2 user-data")
	}
	if got := string(fullTree.Files["ec2/2009-04-04/user-data"]); got != full.UserData {
		t.Errorf("ec2 user-data = %q", got)
	}
}

// filesIn lists the file names directly under dir.
func filesIn(t *metadata.Tree, dir string) []string {
	var out []string
	for _, p := range t.Paths() {
		if rest, ok := strings.CutPrefix(p, dir); ok && !strings.Contains(rest, "/") {
			out = append(out, rest)
		}
	}
	return out
}

func TestRandomSeedFreshAndFromOptions(t *testing.T) {
	in := richInstance(t)
	seed := func(opts metadata.Options) string {
		tr, err := metadata.Render(in, opts)
		if err != nil {
			t.Fatal(err)
		}
		var md struct {
			RandomSeed string `json:"random_seed"`
		}
		if err := json.Unmarshal(tr.Files["openstack/latest/meta_data.json"], &md); err != nil {
			t.Fatal(err)
		}
		return md.RandomSeed
	}
	if got, want := seed(deterministic()), base64.StdEncoding.EncodeToString(make([]byte, 512)); got != want {
		t.Errorf("seed from zero reader = %q, want %q", got, want)
	}
	if a, b := seed(metadata.Options{}), seed(metadata.Options{}); a == b {
		t.Error("two renders with crypto/rand produced the same random_seed")
	}
	if _, err := metadata.Render(in, metadata.Options{Rand: bytes.NewReader(make([]byte, 10))}); err == nil {
		t.Error("Render with a short random source succeeded")
	}
	noUUID := *in
	noUUID.UUID = ""
	if _, err := metadata.Render(&noUUID, deterministic()); err == nil {
		t.Error("Render of an instance without uuid succeeded")
	}
}

func TestHostname(t *testing.T) {
	for _, tc := range []struct {
		hostname string
		opts     metadata.Options
		want     string
	}{
		{"web", metadata.Options{}, "web.novalocal"},
		{"web", metadata.Options{DHCPDomain: "example.org"}, "web.example.org"},
		{"web", metadata.Options{NoDHCPDomain: true}, "web"},
		{"", metadata.Options{}, "inst.novalocal"}, // falls back to the name
	} {
		in := &model.Instance{Name: "inst", UUID: "11111111-2222-4333-8444-555555555555", Hostname: tc.hostname}
		tc.opts.Rand = zeros{}
		tr, err := metadata.Render(in, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		var md struct {
			Hostname string `json:"hostname"`
		}
		if err := json.Unmarshal(tr.Files["openstack/latest/meta_data.json"], &md); err != nil {
			t.Fatal(err)
		}
		var ec2 struct {
			Hostname      string `json:"hostname"`
			LocalHostname string `json:"local-hostname"`
		}
		if err := json.Unmarshal(tr.Files["ec2/latest/meta-data.json"], &ec2); err != nil {
			t.Fatal(err)
		}
		if md.Hostname != tc.want || ec2.Hostname != tc.want || ec2.LocalHostname != tc.want {
			t.Errorf("hostname %q %+v: meta_data %q, ec2 %q/%q, want %q", tc.hostname, tc.opts, md.Hostname, ec2.Hostname, ec2.LocalHostname, tc.want)
		}
	}
}

// devicesCase describes an instance's devices and how each version lists them.
type devicesCase struct {
	name string
	in   model.Instance
	// want maps a version to the expected devices JSON; versions not listed
	// expect the value of the closest earlier listed version. Versions
	// before 2016-06-30 have no devices key at all.
	want map[string]string
}

func (c devicesCase) expect(v string) string {
	best, out := "", ""
	for k, js := range c.want {
		kk := k
		if kk == "latest" {
			kk = metadata.OpenStackLatest
		}
		vv := v
		if vv == "latest" {
			vv = metadata.OpenStackLatest
		}
		if kk <= vv && kk >= best {
			best, out = kk, js
		}
	}
	return out
}

func TestDeviceRules(t *testing.T) {
	const (
		mac  = "52:54:00:00:00:01"
		pci1 = "0000:00:03.0"
		sid  = "7f3c9a52-1b0e-4a8e-8f7e-5d3c2b1a0f99"
	)
	cases := []devicesCase{
		{
			name: "tagged nic with vlan",
			in:   model.Instance{NICs: []model.NIC{{MAC: mac, Address: pci1, Tag: "t", VLAN: intp(100)}}},
			want: map[string]string{
				metadata.NewtonOne: `[{"type":"nic","bus":"pci","address":"0000:00:03.0","mac":"52:54:00:00:00:01","tags":["t"]}]`,
				metadata.Ocata:     `[{"type":"nic","bus":"pci","address":"0000:00:03.0","mac":"52:54:00:00:00:01","tags":["t"],"vlan":100}]`,
				metadata.Rocky:     `[{"type":"nic","bus":"pci","address":"0000:00:03.0","mac":"52:54:00:00:00:01","tags":["t"],"vlan":100,"vf_trusted":false}]`,
			},
		},
		{
			name: "vlan 0 is a vlan",
			in:   model.Instance{NICs: []model.NIC{{MAC: mac, Tag: "t", VLAN: intp(0)}}},
			want: map[string]string{
				metadata.NewtonOne: `[{"type":"nic","bus":"pci","address":"none","mac":"52:54:00:00:00:01","tags":["t"]}]`,
				metadata.Ocata:     `[{"type":"nic","bus":"pci","address":"none","mac":"52:54:00:00:00:01","tags":["t"],"vlan":0}]`,
				metadata.Rocky:     `[{"type":"nic","bus":"pci","address":"none","mac":"52:54:00:00:00:01","tags":["t"],"vlan":0,"vf_trusted":false}]`,
			},
		},
		{
			name: "trusted vf",
			in:   model.Instance{NICs: []model.NIC{{MAC: mac, Address: pci1, Tag: "t", VFTrusted: true}}},
			want: map[string]string{
				metadata.NewtonOne: `[{"type":"nic","bus":"pci","address":"0000:00:03.0","mac":"52:54:00:00:00:01","tags":["t"]}]`,
				metadata.Rocky:     `[{"type":"nic","bus":"pci","address":"0000:00:03.0","mac":"52:54:00:00:00:01","tags":["t"],"vf_trusted":true}]`,
			},
		},
		{
			name: "untagged vlan-less nic appears from rocky",
			in:   model.Instance{NICs: []model.NIC{{MAC: mac, Address: pci1}}},
			want: map[string]string{
				metadata.NewtonOne: `[]`,
				metadata.Rocky:     `[{"type":"nic","bus":"pci","address":"0000:00:03.0","mac":"52:54:00:00:00:01","vf_trusted":false}]`,
			},
		},
		{
			name: "untagged nic with vlan appears from ocata",
			in:   model.Instance{NICs: []model.NIC{{MAC: mac, VLAN: intp(7)}}},
			want: map[string]string{
				metadata.NewtonOne: `[]`,
				metadata.Ocata:     `[{"type":"nic","bus":"pci","address":"none","mac":"52:54:00:00:00:01","vlan":7}]`,
				metadata.Rocky:     `[{"type":"nic","bus":"pci","address":"none","mac":"52:54:00:00:00:01","vlan":7,"vf_trusted":false}]`,
			},
		},
		{
			name: "nic on bus none",
			in:   model.Instance{NICs: []model.NIC{{MAC: mac, Bus: "none", Tag: "t"}}},
			want: map[string]string{
				metadata.NewtonOne: `[{"type":"nic","bus":"none","address":"none","mac":"52:54:00:00:00:01","tags":["t"]}]`,
				metadata.Rocky:     `[{"type":"nic","bus":"none","address":"none","mac":"52:54:00:00:00:01","tags":["t"],"vf_trusted":false}]`,
			},
		},
		{
			name: "only tagged disks",
			in: model.Instance{Disks: []model.Disk{
				{Name: "vda", Bus: "virtio", Address: "0000:00:04.0", Serial: "root"},
				{Name: "vdb", Bus: "virtio", Address: "0000:00:05.0", Serial: "data", Tag: "data"},
			}},
			want: map[string]string{
				metadata.NewtonOne: `[{"type":"disk","bus":"pci","address":"0000:00:05.0","serial":"data","tags":["data"]}]`,
				metadata.Epoxy:     `[{"type":"disk","bus":"pci","address":"0000:00:05.0","serial":"data","tags":["data"],"encrypted":false}]`,
			},
		},
		{
			name: "untagged encrypted disk only from epoxy",
			in: model.Instance{Disks: []model.Disk{
				{Name: "vda", Bus: "virtio", Address: "0000:00:04.0", Serial: "root", Encrypted: true},
				{Name: "vdb", Bus: "virtio", Serial: "data", Tag: "data", Encrypted: true},
			}},
			want: map[string]string{
				metadata.NewtonOne: `[{"type":"disk","bus":"pci","address":"none","serial":"data","tags":["data"]}]`,
				metadata.Epoxy: `[{"type":"disk","bus":"pci","address":"0000:00:04.0","serial":"root","encrypted":true},` +
					`{"type":"disk","bus":"pci","address":"none","serial":"data","tags":["data"],"encrypted":true}]`,
			},
		},
		{
			name: "disk buses",
			in: model.Instance{Disks: []model.Disk{
				{Name: "vda", Bus: "virtio", Address: "0000:00:04.0", Tag: "virtio"},
				{Name: "vdb", Tag: "nobus"}, // not normalized: bus defaults to virtio
				{Name: "sda", Bus: "sata", Address: "0:0:0:0", Tag: "sata"},
				{Name: "sdb", Bus: "scsi", Tag: "scsi"},
				{Name: "hda", Bus: "ide", Address: "0:1", Tag: "ide"},
				{Name: "sdc", Bus: "usb", Tag: "usb"},
			}},
			want: map[string]string{
				metadata.NewtonOne: `[` +
					`{"type":"disk","bus":"pci","address":"0000:00:04.0","tags":["virtio"]},` +
					`{"type":"disk","bus":"pci","address":"none","tags":["nobus"]},` +
					`{"type":"disk","bus":"scsi","address":"0:0:0:0","tags":["sata"]},` +
					`{"type":"disk","bus":"scsi","address":"none","tags":["scsi"]},` +
					`{"type":"disk","bus":"ide","address":"0:1","tags":["ide"]},` +
					`{"type":"disk","bus":"usb","address":"none","tags":["usb"]}]`,
				metadata.Epoxy: `[` +
					`{"type":"disk","bus":"pci","address":"0000:00:04.0","tags":["virtio"],"encrypted":false},` +
					`{"type":"disk","bus":"pci","address":"none","tags":["nobus"],"encrypted":false},` +
					`{"type":"disk","bus":"scsi","address":"0:0:0:0","tags":["sata"],"encrypted":false},` +
					`{"type":"disk","bus":"scsi","address":"none","tags":["scsi"],"encrypted":false},` +
					`{"type":"disk","bus":"ide","address":"0:1","tags":["ide"],"encrypted":false},` +
					`{"type":"disk","bus":"usb","address":"none","tags":["usb"],"encrypted":false}]`,
			},
		},
		{
			name: "shares only from epoxy",
			in:   model.Instance{Shares: []model.Share{{ShareID: sid, Tag: "webdata", Source: "/srv"}}},
			want: map[string]string{
				metadata.NewtonOne: `[]`,
				metadata.Epoxy:     `[{"type":"share","bus":"none","address":"none","share_id":"` + sid + `","tag":"webdata"}]`,
			},
		},
		{
			name: "share tag defaults to share id",
			in:   model.Instance{Shares: []model.Share{{ShareID: sid}}},
			want: map[string]string{
				metadata.NewtonOne: `[]`,
				metadata.Epoxy:     `[{"type":"share","bus":"none","address":"none","share_id":"` + sid + `","tag":"` + sid + `"}]`,
			},
		},
		{
			name: "tagged pci devices only from epoxy, untagged never, nothing of the host",
			in: model.Instance{PCIDevices: []model.PCIDevice{
				{Address: "0000:3b:00.0", OneTimeUse: true, Alias: "gpu", Tag: "ml", GuestAddress: "0000:07:00.0"},
				{Address: "0000:3c:00.0", OneTimeUse: true, Alias: "nvme"},
				{Address: "0000:af:10.7", Tag: "scratch"},
			}},
			want: map[string]string{
				metadata.NewtonOne: `[]`,
				metadata.Epoxy: `[{"type":"pci","bus":"pci","address":"0000:07:00.0","tags":["ml"]},` +
					`{"type":"pci","bus":"pci","address":"none","tags":["scratch"]}]`,
			},
		},
		{
			name: "order: nics, disks, shares",
			in: model.Instance{
				Shares: []model.Share{{ShareID: sid, Tag: "s"}},
				Disks:  []model.Disk{{Name: "vda", Tag: "d"}},
				NICs:   []model.NIC{{MAC: mac, Tag: "n"}},
			},
			want: map[string]string{
				metadata.NewtonOne: `[{"type":"nic","bus":"pci","address":"none","mac":"52:54:00:00:00:01","tags":["n"]},` +
					`{"type":"disk","bus":"pci","address":"none","tags":["d"]}]`,
				metadata.Rocky: `[{"type":"nic","bus":"pci","address":"none","mac":"52:54:00:00:00:01","tags":["n"],"vf_trusted":false},` +
					`{"type":"disk","bus":"pci","address":"none","tags":["d"]}]`,
				metadata.Epoxy: `[{"type":"nic","bus":"pci","address":"none","mac":"52:54:00:00:00:01","tags":["n"],"vf_trusted":false},` +
					`{"type":"disk","bus":"pci","address":"none","tags":["d"],"encrypted":false},` +
					`{"type":"share","bus":"none","address":"none","share_id":"` + sid + `","tag":"s"}]`,
			},
		},
	}
	for _, c := range cases {
		for _, normalized := range []bool{false, true} {
			name := c.name
			if normalized {
				name += "/normalized"
			}
			t.Run(name, func(t *testing.T) {
				in := c.in
				// Deep-enough copies: Normalize writes into the slices.
				in.NICs = slices.Clone(in.NICs)
				in.Disks = slices.Clone(in.Disks)
				in.Shares = slices.Clone(in.Shares)
				in.PCIDevices = slices.Clone(in.PCIDevices)
				in.Name, in.UUID = "dev", "11111111-2222-4333-8444-555555555555"
				if normalized {
					in.Normalize()
					if err := in.Validate(); err != nil {
						t.Fatalf("case is not a valid spec: %v", err)
					}
				}
				tr := render(t, &in)
				for _, v := range allOpenStack() {
					md := decodeObject(t, tr.Files["openstack/"+v+"/meta_data.json"])
					raw, ok := md["devices"]
					if !atLeast(v, metadata.NewtonOne) {
						if ok {
							t.Errorf("%s: devices present: %s", v, raw)
						}
						continue
					}
					want := compactJSON(t, c.expect(v))
					if string(raw) != want {
						t.Errorf("%s: devices =\n  %s\nwant\n  %s", v, raw, want)
					}
					devs, err := metadata.Devices(&in, v)
					if err != nil {
						t.Fatalf("Devices(%s): %v", v, err)
					}
					if devs == nil {
						devs = []metadata.Device{}
					}
					b, _ := json.Marshal(devs)
					if string(b) != want {
						t.Errorf("%s: Devices() = %s, want %s", v, b, want)
					}
				}
			})
		}
	}
}

func TestDevicesSchemaPerVersion(t *testing.T) {
	for _, v := range allOpenStack() {
		got := metadata.DevicesSchema(v)
		want := "device-role-tagging/1.0"
		if atLeast(v, metadata.Epoxy) {
			want = "device-role-tagging/1.2"
		}
		if string(got) != want {
			t.Errorf("DevicesSchema(%s) = %s, want %s", v, got, want)
		}
	}
}

// TestRenderRefusesInvalidDevices builds instances that skip model
// validation and checks that the schema check stops the whole tree.
func TestRenderRefusesInvalidDevices(t *testing.T) {
	const uuid = "11111111-2222-4333-8444-555555555555"
	for _, tc := range []struct {
		name    string
		in      model.Instance
		version string // first version whose devices list is refused
		pointer string
	}{
		{
			name:    "tagged nic with bad mac",
			in:      model.Instance{NICs: []model.NIC{{MAC: "zz", Tag: "t"}}},
			version: metadata.NewtonOne,
			pointer: "/devices/0/mac",
		},
		{
			name:    "untagged nic with bad mac is refused once it is listed",
			in:      model.Instance{NICs: []model.NIC{{MAC: "zz"}}},
			version: metadata.Rocky,
			pointer: "/devices/0/mac",
		},
		{
			name: "bogus pci address on a virtio disk",
			in: model.Instance{
				NICs:  []model.NIC{{MAC: "52:54:00:00:00:01", Tag: "ok"}},
				Disks: []model.Disk{{Name: "vda", Bus: "virtio", Address: "bogus", Tag: "d"}},
			},
			version: metadata.NewtonOne,
			pointer: "/devices/1/address",
		},
		{
			name:    "bad share tag",
			in:      model.Instance{Shares: []model.Share{{ShareID: "7f3c9a52-1b0e-4a8e-8f7e-5d3c2b1a0f99", Tag: "no spaces"}}},
			version: metadata.Epoxy,
			pointer: "/devices/0/tag",
		},
		{
			name:    "unknown disk bus",
			in:      model.Instance{Disks: []model.Disk{{Name: "fd0", Bus: "floppy", Tag: "f"}}},
			version: metadata.NewtonOne,
			pointer: "/devices/0/bus",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.Name, in.UUID = "bad", uuid
			tr, err := metadata.Render(&in, deterministic())
			if err == nil {
				t.Fatal("Render succeeded")
			}
			if tr != nil {
				t.Error("Render returned a tree with its error")
			}
			msg := err.Error()
			for _, want := range []string{tc.pointer, "openstack/" + tc.version, "devices document refused"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not mention %q", msg, want)
				}
			}
			if _, err := metadata.Devices(&in, tc.version); err == nil || !strings.Contains(err.Error(), tc.pointer) {
				t.Errorf("Devices(%s) error = %v, want one mentioning %s", tc.version, err, tc.pointer)
			}
		})
	}

	// ValidateDevices directly: 1.0 refuses what only 1.1 allows.
	enc := true
	disk := []metadata.Device{{Type: "disk", Bus: "pci", Address: "none", Encrypted: &enc}}
	if err := metadata.ValidateDevices(metadata.Victoria, disk); err == nil || !strings.Contains(err.Error(), "/devices/0") {
		t.Errorf("encrypted disk under 1.0: err = %v, want a refusal at /devices/0", err)
	}
	if err := metadata.ValidateDevices(metadata.Epoxy, disk); err != nil {
		t.Errorf("encrypted disk under 1.1: %v", err)
	}
	if err := metadata.ValidateDevices("latest", nil); err != nil {
		t.Errorf("empty list: %v", err)
	}
}

// TestGolden renders examples/web.yaml and compares every file of the tree
// with testdata/golden. Run with -update to rewrite the golden files.
func TestGolden(t *testing.T) {
	spec, err := os.ReadFile("../../examples/web.yaml")
	if err != nil {
		t.Fatal(err)
	}
	in, err := model.ParseSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	tr := render(t, in)
	root := filepath.Join("testdata", "golden")

	if *update {
		if err := os.RemoveAll(root); err != nil {
			t.Fatal(err)
		}
		for p, b := range tr.Files {
			f := filepath.Join(root, filepath.FromSlash(p))
			if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}

	for _, p := range tr.Paths() {
		want, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			t.Errorf("%s: %v (run go test -update to create golden files)", p, err)
			continue
		}
		if got := tr.Files[p]; !bytes.Equal(got, want) {
			t.Errorf("%s differs from golden:\n got %s\nwant %s", p, got, want)
		}
	}
	// Every golden file is still produced.
	err = filepath.WalkDir(root, func(f string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, f)
		if _, ok := tr.Get(filepath.ToSlash(rel)); !ok {
			t.Errorf("golden file %s is no longer rendered", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// The tree survives the store encoding unchanged.
	enc, err := tr.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := metadata.DecodeTree(enc)
	if err != nil {
		t.Fatal(err)
	}
	metadata.SameTreeFiles(t, back, tr)
}

func TestDecodeTreeErrors(t *testing.T) {
	for _, in := range []string{``, `{`, `{}`, `{"files":null}`, `[]`} {
		if _, err := metadata.DecodeTree([]byte(in)); err == nil {
			t.Errorf("DecodeTree(%q) succeeded", in)
		}
	}
}

func TestEC2KeysPerVersion(t *testing.T) {
	in := richInstance(t)
	in.NICs = []model.NIC{
		{MAC: "52:54:00:00:00:01"}, // DHCP
		{MAC: "52:54:00:00:00:02", IPs: []model.IPConfig{{Address: "2001:db8::5/64"}, {Address: "192.0.2.7/24"}}},
	}
	in.Disks = []model.Disk{{Name: "vda"}, {Name: "vdb"}, {Name: "vdc"}}
	in.Normalize()
	if err := in.Validate(); err != nil {
		t.Fatal(err)
	}
	tr := render(t, in)

	for _, v := range allEC2() {
		t.Run(v, func(t *testing.T) {
			vv := v
			if vv == "latest" {
				vv = metadata.EC2Latest
			}
			want := []string{"ami-id", "ami-launch-index", "ami-manifest-path", "instance-id", "hostname",
				"local-ipv4", "reservation-id", "security-groups", "public-keys"}
			if vv >= "2007-01-19" {
				want = append(want, "local-hostname", "public-hostname", "public-ipv4")
			}
			if vv >= "2007-08-29" {
				want = append(want, "instance-type")
			}
			if vv >= "2007-12-15" {
				want = append(want, "block-device-mapping")
			}
			if vv >= "2008-02-01" {
				want = append(want, "placement")
			}
			if vv >= "2008-09-01" {
				want = append(want, "instance-action")
			}
			md := decodeObject(t, tr.Files["ec2/"+v+"/meta-data.json"])
			if got := keysOf(md); !slices.Equal(got, sorted(want...)) {
				t.Errorf("keys = %v, want %v", got, sorted(want...))
			}
			for k, want := range map[string]string{
				"ami-launch-index":     `2`,
				"ami-manifest-path":    `"FIXME"`,
				"hostname":             `"rich.novalocal"`,
				"local-hostname":       `"rich.novalocal"`,
				"public-hostname":      `"rich.novalocal"`,
				"public-ipv4":          `""`,
				"local-ipv4":           `"192.0.2.7"`, // first static IPv4
				"security-groups":      `["default"]`,
				"instance-type":        `"m1.tiny"`,
				"placement":            `{"availability-zone":"az1"}`,
				"instance-action":      `"none"`,
				"public-keys":          `{"0":{"openssh-key":"ssh-ed25519 AAAA k1@host"}}`,
				"block-device-mapping": `{"ami":"vda","ebs0":"/dev/vdb","ebs1":"/dev/vdc","root":"/dev/vda"}`,
			} {
				if raw, ok := md[k]; ok && string(raw) != want {
					t.Errorf("%s = %s, want %s", k, raw, want)
				}
			}
			idRE := map[string]*regexp.Regexp{
				"ami-id":         regexp.MustCompile(`^"ami-[0-9a-f]{8}"$`),
				"instance-id":    regexp.MustCompile(`^"i-[0-9a-f]{8}"$`),
				"reservation-id": regexp.MustCompile(`^"r-[0-9a-f]{8}"$`),
			}
			for k, re := range idRE {
				if !re.Match(md[k]) {
					t.Errorf("%s = %s, want %s", k, md[k], re)
				}
			}
		})
	}
	if a, b := tr.Files["ec2/latest/meta-data.json"], tr.Files["ec2/"+metadata.EC2Latest+"/meta-data.json"]; !bytes.Equal(a, b) {
		t.Errorf("ec2/latest differs from ec2/%s", metadata.EC2Latest)
	}

	// local-ipv4 falls back to the first IPv4 source address; no key, no public-keys.
	bare := &model.Instance{Name: "b", UUID: "11111111-2222-4333-8444-555555555555", Addresses: []string{"fd00::1", "10.1.2.3"}}
	bt := render(t, bare)
	md := decodeObject(t, bt.Files["ec2/latest/meta-data.json"])
	if got := string(md["local-ipv4"]); got != `"10.1.2.3"` {
		t.Errorf("fallback local-ipv4 = %s", got)
	}
	if _, ok := md["public-keys"]; ok {
		t.Error("public-keys present without keys")
	}
	if got := string(md["block-device-mapping"]); got != `{}` {
		t.Errorf("block-device-mapping without disks = %s, want {}", got)
	}
}

func TestConfigDriveFiles(t *testing.T) {
	tr := render(t, richInstance(t))
	files := tr.ConfigDriveFiles()
	var got []string
	for _, f := range files {
		got = append(got, f.Path)
		want, ok := tr.DriveOnly[f.Path]
		if !ok {
			want = tr.Files[f.Path]
		}
		if !bytes.Equal(f.Data, want) {
			t.Errorf("%s: data differs from the tree", f.Path)
		}
	}
	if !sort.StringsAreSorted(got) {
		t.Errorf("paths are not sorted: %v", got)
	}
	var want []string
	all := tr.Paths()
	for p := range tr.DriveOnly {
		if !slices.Contains(all, p) {
			all = append(all, p)
		}
	}
	sort.Strings(all)
	for _, p := range all {
		if rest, ok := strings.CutPrefix(p, "ec2/"); ok {
			v, _, _ := strings.Cut(rest, "/")
			if v != "2009-04-04" && v != "latest" {
				continue
			}
		}
		want = append(want, p)
	}
	if !slices.Equal(got, want) {
		t.Errorf("config drive files =\n%v\nwant\n%v", got, want)
	}
	// Spot checks of what must and must not be there.
	has := map[string]bool{}
	for _, p := range got {
		has[p] = true
	}
	for _, p := range []string{"ec2/2009-04-04/meta-data.json", "ec2/2009-04-04/user-data", "ec2/latest/meta-data.json",
		"openstack/2012-08-10/meta_data.json", "openstack/latest/vendor_data2.json", "openstack/content/0000", "openstack/content/0001"} {
		if !has[p] {
			t.Errorf("config drive lacks %s", p)
		}
	}
	for _, v := range metadata.OpenStackVersions {
		if !has["openstack/"+v+"/meta_data.json"] {
			t.Errorf("config drive lacks openstack/%s", v)
		}
	}
	for _, v := range metadata.EC2Versions[:len(metadata.EC2Versions)-1] {
		if has["ec2/"+v+"/meta-data.json"] {
			t.Errorf("config drive has skipped version ec2/%s", v)
		}
	}
	for _, p := range got {
		if strings.HasSuffix(p, "password") {
			t.Errorf("config drive holds %s", p)
		}
	}
}

func TestNetworkData(t *testing.T) {
	const uuid = "11111111-2222-4333-8444-555555555555"
	in := &model.Instance{
		Name: "net", UUID: uuid,
		NICs: []model.NIC{
			{
				MAC: "52:54:00:00:00:01", Network: "net-a", MTU: 1450,
				IPs: []model.IPConfig{{Address: "192.168.1.10/24", Gateway: "192.168.1.1", DNS: []string{"192.168.1.1", "9.9.9.9"}}},
			},
			{
				MAC: "52:54:00:00:00:02", Network: "net-b",
				IPs: []model.IPConfig{
					{Address: "2001:db8:1::10/64", Gateway: "fe80::1", DNS: []string{"2001:db8:1::53", "9.9.9.9"}},
					{Address: "10.9.0.2/16"}, // no gateway, no DNS
				},
			},
			{MAC: "52:54:00:00:00:03", MTU: 9000}, // DHCP
		},
	}
	in.Normalize()
	if err := in.Validate(); err != nil {
		t.Fatal(err)
	}
	tr := render(t, in)
	raw := tr.Files["openstack/latest/network_data.json"]

	type route struct{ Network, Netmask, Gateway string }
	type svc struct{ Type, Address string }
	var doc struct {
		Links []struct {
			ID                 string `json:"id"`
			VIFID              string `json:"vif_id"`
			Type               string `json:"type"`
			MTU                *int   `json:"mtu"`
			EthernetMACAddress string `json:"ethernet_mac_address"`
		} `json:"links"`
		Networks []struct {
			ID        string  `json:"id"`
			Type      string  `json:"type"`
			Link      string  `json:"link"`
			IPAddress string  `json:"ip_address"`
			Netmask   string  `json:"netmask"`
			Routes    []route `json:"routes"`
			NetworkID string  `json:"network_id"`
			Services  []svc   `json:"services"`
		} `json:"networks"`
		Services []svc `json:"services"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	uuidRE := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

	if len(doc.Links) != 3 {
		t.Fatalf("links = %d, want 3: %s", len(doc.Links), raw)
	}
	wantMTU := []*int{intp(1450), nil, nil} // DHCP: the guest learns the MTU from DHCP
	for i, l := range doc.Links {
		if l.ID != fmt.Sprintf("interface%d", i) || l.Type != "phy" || l.EthernetMACAddress != in.NICs[i].MAC {
			t.Errorf("link %d = %+v", i, l)
		}
		if !uuidRE.MatchString(l.VIFID) {
			t.Errorf("link %d vif_id %q is not a UUID", i, l.VIFID)
		}
		if (l.MTU == nil) != (wantMTU[i] == nil) || (l.MTU != nil && *l.MTU != *wantMTU[i]) {
			t.Errorf("link %d mtu = %v, want %v", i, l.MTU, wantMTU[i])
		}
	}
	if doc.Links[0].VIFID == doc.Links[1].VIFID {
		t.Error("two links share a vif_id")
	}

	if len(doc.Networks) != 4 {
		t.Fatalf("networks = %d, want 4: %s", len(doc.Networks), raw)
	}
	n := doc.Networks
	check := func(i int, id, typ, link, ip, mask, netID string) {
		t.Helper()
		if n[i].ID != id || n[i].Type != typ || n[i].Link != link || n[i].IPAddress != ip || n[i].Netmask != mask || n[i].NetworkID != netID {
			t.Errorf("network %d = %+v, want id %s type %s link %s ip %s netmask %s network_id %s", i, n[i], id, typ, link, ip, mask, netID)
		}
	}
	check(0, "network0", "ipv4", "interface0", "192.168.1.10", "255.255.255.0", "net-a")
	check(1, "network1", "ipv6", "interface1", "2001:db8:1::10", "ffff:ffff:ffff:ffff::", "net-b")
	check(2, "network2", "ipv4", "interface1", "10.9.0.2", "255.255.0.0", "net-b")
	check(3, "network3", "ipv4_dhcp", "interface2", "", "", n[3].NetworkID)
	if !uuidRE.MatchString(n[3].NetworkID) {
		t.Errorf("DHCP network_id %q is not a derived UUID", n[3].NetworkID)
	}
	if !slices.Equal(n[0].Routes, []route{{"0.0.0.0", "0.0.0.0", "192.168.1.1"}}) {
		t.Errorf("IPv4 routes = %+v", n[0].Routes)
	}
	if !slices.Equal(n[1].Routes, []route{{"::", "::", "fe80::1"}}) {
		t.Errorf("IPv6 routes = %+v", n[1].Routes)
	}
	if !slices.Equal(n[0].Services, []svc{{"dns", "192.168.1.1"}, {"dns", "9.9.9.9"}}) {
		t.Errorf("network0 services = %+v", n[0].Services)
	}
	if !slices.Equal(n[1].Services, []svc{{"dns", "2001:db8:1::53"}, {"dns", "9.9.9.9"}}) {
		t.Errorf("network1 services = %+v", n[1].Services)
	}
	// Top-level services: every DNS server once, in first-seen order.
	if !slices.Equal(doc.Services, []svc{{"dns", "192.168.1.1"}, {"dns", "9.9.9.9"}, {"dns", "2001:db8:1::53"}}) {
		t.Errorf("services = %+v", doc.Services)
	}

	// Raw shapes: a static network without a gateway has "routes": [];
	// a DHCP network has no address keys.
	var rawDoc struct {
		Networks []map[string]json.RawMessage `json:"networks"`
	}
	if err := json.Unmarshal(raw, &rawDoc); err != nil {
		t.Fatal(err)
	}
	if got := string(rawDoc.Networks[2]["routes"]); got != "[]" {
		t.Errorf("routes without gateway = %q, want []", got)
	}
	if got, want := keysOf(rawDoc.Networks[3]), []string{"id", "link", "network_id", "type"}; !slices.Equal(got, want) {
		t.Errorf("DHCP network keys = %v, want %v", got, want)
	}
	var rawLinks struct {
		Links []map[string]json.RawMessage `json:"links"`
	}
	if err := json.Unmarshal(raw, &rawLinks); err != nil {
		t.Fatal(err)
	}
	if got := string(rawLinks.Links[2]["mtu"]); got != "null" {
		t.Errorf("DHCP link mtu = %s, want null", got)
	}

	// Same document in every version that has it, and stable across renders.
	for _, v := range allOpenStack() {
		if b, ok := tr.Get("openstack/" + v + "/network_data.json"); ok && !bytes.Equal(b, raw) {
			t.Errorf("network_data.json of %s differs from latest", v)
		}
	}
	if again := render(t, in).Files["openstack/latest/network_data.json"]; !bytes.Equal(again, raw) {
		t.Error("network_data.json is not stable across renders")
	}

	// No NICs: {}.
	empty := render(t, &model.Instance{Name: "e", UUID: uuid})
	if got := string(empty.Files["openstack/latest/network_data.json"]); got != "{}" {
		t.Errorf("network_data.json without NICs = %s, want {}", got)
	}
}

// TestNetworkDataNovaShape checks the keys Nova always emits
// (nova/virt/netutils.py get_network_metadata and _get_nets): the three
// top-level lists, and "services" on every static network, [] when the
// subnet has no DNS server.
func TestNetworkDataNovaShape(t *testing.T) {
	in := &model.Instance{
		Name: "shape", UUID: "11111111-2222-4333-8444-555555555555",
		NICs: []model.NIC{
			{MAC: "52:54:00:00:00:01", IPs: []model.IPConfig{{Address: "10.0.0.2/24", Gateway: "10.0.0.1"}}},
			{MAC: "52:54:00:00:00:02"},
		},
	}
	tr := render(t, in)
	raw := tr.Files["openstack/latest/network_data.json"]
	top := decodeObject(t, raw)
	if got, want := keysOf(top), []string{"links", "networks", "services"}; !slices.Equal(got, want) {
		t.Errorf("top-level keys = %v, want %v (Nova always returns all three lists): %s", got, want, raw)
	}
	var doc struct {
		Networks []map[string]json.RawMessage `json:"networks"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if got := string(doc.Networks[0]["services"]); got != "[]" {
		t.Errorf("static network without DNS: services = %q, want [] (Nova: net_info['services'] = _get_dns_services(subnet))", got)
	}
}

// bigInstance has 16 tagged virtio disks and 16 tagged NICs.
func bigInstance(b testing.TB) *model.Instance {
	in := &model.Instance{Name: "big", UUID: "11111111-2222-4333-8444-555555555555", ProjectID: "p", UserData: "#cloud-config\n"}
	for i := range 16 {
		in.Disks = append(in.Disks, model.Disk{
			Name: fmt.Sprintf("vd%c", 'a'+i), Bus: "virtio", Address: fmt.Sprintf("0000:01:%02x.0", i),
			Serial: fmt.Sprintf("serial-%d", i), Tag: fmt.Sprintf("disk%d", i), Encrypted: i%2 == 0,
		})
		in.NICs = append(in.NICs, model.NIC{
			MAC: fmt.Sprintf("52:54:00:00:01:%02x", i), Address: fmt.Sprintf("0000:02:%02x.0", i),
			Tag: fmt.Sprintf("nic%d", i), VLAN: intp(100 + i),
			IPs: []model.IPConfig{{Address: fmt.Sprintf("10.%d.0.2/24", i), Gateway: fmt.Sprintf("10.%d.0.1", i), DNS: []string{"10.0.0.53"}}},
		})
	}
	in.Normalize()
	if err := in.Validate(); err != nil {
		b.Fatal(err)
	}
	return in
}

func BenchmarkRender32Devices(b *testing.B) {
	in := bigInstance(b)
	opts := metadata.Options{Rand: zeros{}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := metadata.Render(in, opts); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDevices(b *testing.B) {
	in := bigInstance(b)
	b.ReportAllocs()
	for b.Loop() {
		devs, err := metadata.Devices(in, "latest")
		if err != nil {
			b.Fatal(err)
		}
		if len(devs) != 32 {
			b.Fatalf("%d devices", len(devs))
		}
	}
}
