package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/vmeta/vmeta/internal/testenv"
)

// systemPython is Debian's interpreter, which sees the cloud-init package
// (a pyenv or venv python3 does not).
const systemPython = "/usr/bin/python3"

// cloudInitVersion is the newest OpenStack metadata version cloud-init
// knows (OS_VERSIONS in cloudinit/sources/helpers/openstack.py, 22.4.2 and
// master): it reads that directory when present.
const cloudInitVersion = "2018-08-27"

var cloudInitCheck struct {
	once   sync.Once
	what   string
	reason string
}

// requireCloudInit stops the test through testenv.Require unless Debian's
// python3 can import cloud-init's OpenStack helpers.
func requireCloudInit(t testing.TB) {
	t.Helper()
	cloudInitCheck.once.Do(func() {
		if _, err := os.Stat(systemPython); err != nil {
			cloudInitCheck.what, cloudInitCheck.reason = systemPython, err.Error()+" (Debian's python3 package; run test/setup)"
			return
		}
		out, err := exec.Command(systemPython, "-c", "import cloudinit.sources.helpers.openstack").CombinedOutput()
		if err != nil {
			cloudInitCheck.what = "cloud-init"
			cloudInitCheck.reason = systemPython + " cannot import cloudinit.sources.helpers.openstack (run test/setup): " + strings.TrimSpace(string(out))
		}
	})
	if cloudInitCheck.what != "" {
		testenv.Require(t, cloudInitCheck.what, cloudInitCheck.reason)
	}
}

// cloudInitRead is what testdata/cloudinit_read.py prints.
type cloudInitRead struct {
	Version      string   `json:"version"`
	ReadVersion  int      `json:"read_version"`
	ResultKeys   []string `json:"result_keys"`
	MetadataKeys []string `json:"metadata_keys"`
	Metadata     struct {
		UUID             string            `json:"uuid"`
		InstanceID       string            `json:"instance-id"`
		Hostname         string            `json:"hostname"`
		LocalHostname    string            `json:"local-hostname"`
		Name             string            `json:"name"`
		PublicKeys       map[string]string `json:"public_keys"`
		AvailabilityZone string            `json:"availability_zone"`
		ProjectID        string            `json:"project_id"`
		Meta             map[string]string `json:"meta"`
		LaunchIndex      int               `json:"launch_index"`
	} `json:"metadata"`
	RandomSeedLen  *int              `json:"random_seed_len"`
	HasDevices     bool              `json:"has_devices"`
	Devices        json.RawMessage   `json:"devices"`
	UserDataB64    *string           `json:"userdata_b64"`
	NetworkData    json.RawMessage   `json:"networkdata"`
	Files          map[string]string `json:"files"`
	EC2Metadata    map[string]any    `json:"ec2_metadata"`
	NetConfig      *netConfig        `json:"netconfig"`
	NetConfigError string            `json:"netconfig_error"`
}

// netConfig is cloud-init's network config v1 (convert_net_json).
type netConfig struct {
	Version int `json:"version"`
	Config  []struct {
		Type       string `json:"type"`
		Name       string `json:"name"`
		MACAddress string `json:"mac_address"`
		MTU        *int   `json:"mtu"`
		Address    string `json:"address"` // nameserver entries
		Subnets    []struct {
			Type    string `json:"type"`
			Address string `json:"address"`
			Netmask string `json:"netmask"`
			Gateway string `json:"gateway"`
			Routes  []struct {
				Network string `json:"network"`
				Netmask string `json:"netmask"`
				Gateway string `json:"gateway"`
			} `json:"routes"`
		} `json:"subnets"`
	} `json:"config"`
}

// readWithCloudInit runs testdata/cloudinit_read.py: mode "drive" reads an
// unpacked config drive at src with ConfigDriveReader, mode "service" reads
// the metadata service at base URL src with MetadataReader.
func readWithCloudInit(t testing.TB, mode, src string, s testSpec) cloudInitRead {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", "cloudinit_read.py"))
	if err != nil {
		t.Fatal(err)
	}
	macs, err := json.Marshal(s.knownMACs())
	if err != nil {
		t.Fatal(err)
	}
	r := runCmd(t, testenv.ChildEnv(nil), systemPython, script, mode, src, string(macs))
	if r.code != 0 {
		t.Fatalf("cloud-init (%s %s) failed with exit status %d\nstderr:\n%s\nstdout:\n%s", mode, src, r.code, r.stderr, r.stdout)
	}
	var out cloudInitRead
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("cloud-init (%s %s): decode its output: %v\nstdout:\n%s\nstderr:\n%s", mode, src, err, r.stdout, r.stderr)
	}
	return out
}

// checkCloudInitRead asserts what cloud-init read against the spec.
// fromDrive selects the config-drive-only facts: injected files and the
// EC2 metadata (the HTTP reader's EC2 crawl is disabled in the script).
func checkCloudInitRead(t *testing.T, where string, r cloudInitRead, s testSpec, fromDrive bool) {
	t.Helper()
	if r.Version != cloudInitVersion {
		t.Errorf("%s: cloud-init picked version %q, want %q (the newest it knows)", where, r.Version, cloudInitVersion)
	}
	if r.ReadVersion != 2 {
		t.Errorf("%s: read_v2 result version %d, want 2", where, r.ReadVersion)
	}
	md := r.Metadata
	for _, c := range []struct{ key, got, want string }{
		{"uuid", md.UUID, s.UUID},
		{"instance-id", md.InstanceID, s.UUID},
		{"hostname", md.Hostname, s.fqdn()},
		{"local-hostname", md.LocalHostname, s.fqdn()},
		{"name", md.Name, s.Name},
		{"availability_zone", md.AvailabilityZone, s.AvailabilityZone},
		{"project_id", md.ProjectID, s.ProjectID},
	} {
		if c.got != c.want {
			t.Errorf("%s: metadata[%q] = %q, want %q", where, c.key, c.got, c.want)
		}
	}
	if !reflect.DeepEqual(md.PublicKeys, s.publicKeys()) {
		t.Errorf("%s: public_keys = %v, want %v", where, md.PublicKeys, s.publicKeys())
	}
	if !reflect.DeepEqual(md.Meta, s.Meta) {
		t.Errorf("%s: meta = %v, want %v", where, md.Meta, s.Meta)
	}
	if r.RandomSeedLen == nil || *r.RandomSeedLen != 512 {
		t.Errorf("%s: random_seed decoded to %v bytes, want 512 (Nova's os.urandom(512))", where, r.RandomSeedLen)
	}

	// Devices as cloud-init sees them: version 2018-08-27, so no share
	// devices and no "encrypted" key (checkDevices refuses both there).
	if !r.HasDevices {
		t.Errorf("%s: metadata has no devices key (keys: %v)", where, r.MetadataKeys)
	} else {
		checkDevices(t, where+": devices", r.Devices, s, cloudInitVersion)
	}
	if bytes.Contains(r.Devices, []byte(`"share"`)) || bytes.Contains(r.Devices, []byte(`"encrypted"`)) {
		t.Errorf("%s: devices at %s carry share devices or encrypted flags: %s", where, cloudInitVersion, r.Devices)
	}

	// User data, byte for byte.
	if r.UserDataB64 == nil {
		t.Errorf("%s: no user data", where)
	} else if ud, err := base64.StdEncoding.DecodeString(*r.UserDataB64); err != nil {
		t.Errorf("%s: user data: %v", where, err)
	} else if !bytes.Equal(ud, []byte(s.UserData)) {
		t.Errorf("%s: user data\n got %q\nwant %q", where, ud, s.UserData)
	}

	checkNetworkData(t, where+": network_data.json", r.NetworkData, s)
	checkNetConfig(t, where+": convert_net_json", r, s)

	wantFiles := map[string]string{}
	if fromDrive {
		for _, f := range s.Files {
			wantFiles[f.Path] = base64.StdEncoding.EncodeToString([]byte(f.Content))
		}
	}
	if r.Files == nil {
		r.Files = map[string]string{}
	}
	if !reflect.DeepEqual(r.Files, wantFiles) {
		if fromDrive {
			t.Errorf("%s: injected files (base64) = %v, want %v", where, r.Files, wantFiles)
		} else {
			t.Errorf("%s: cloud-init read injected files %v from the metadata service; like Nova, injected files must be published only on the config drive (internal/model.Instance.Files)", where, r.Files)
		}
	}

	if fromDrive {
		checkEC2(t, where+": ec2/latest/meta-data.json", r.EC2Metadata, s)
	}
}

// checkEC2 checks the EC2 meta-data document of a config drive.
func checkEC2(t *testing.T, where string, ec2 map[string]any, s testSpec) {
	t.Helper()
	if len(ec2) == 0 {
		t.Errorf("%s: empty", where)
		return
	}
	for k, want := range map[string]any{
		"hostname":       s.fqdn(),
		"local-hostname": s.fqdn(),
		"instance-type":  s.Flavor,
		"local-ipv4":     prefixAddr(t, s.NICs[0].IPs[0].Address),
		"placement":      map[string]any{"availability-zone": s.AvailabilityZone},
	} {
		if !reflect.DeepEqual(ec2[k], want) {
			t.Errorf("%s: %q = %#v, want %#v", where, k, ec2[k], want)
		}
	}
	wantKeys := map[string]any{}
	for i, k := range s.PublicKeys {
		wantKeys[strconv.Itoa(i)] = map[string]any{"openssh-key": k.Data}
	}
	if !reflect.DeepEqual(ec2["public-keys"], wantKeys) {
		t.Errorf("%s: public-keys = %#v, want %#v (no _name pseudo-key on a drive)", where, ec2["public-keys"], wantKeys)
	}
	if id, _ := ec2["instance-id"].(string); !strings.HasPrefix(id, "i-") {
		t.Errorf("%s: instance-id %q, want i-XXXXXXXX", where, id)
	}
}

func prefixAddr(t testing.TB, cidr string) string {
	t.Helper()
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		t.Fatalf("spec address %q: %v", cidr, err)
	}
	return p.Addr().String()
}

func prefixMask(t testing.TB, cidr string) string {
	t.Helper()
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		t.Fatalf("spec address %q: %v", cidr, err)
	}
	bits := 32
	if p.Addr().Is6() {
		bits = 128
	}
	return net.IP(net.CIDRMask(p.Bits(), bits)).String()
}

// networkData is network_data.json.
type networkData struct {
	Links []struct {
		ID   string `json:"id"`
		Type string `json:"type"`
		MTU  *int   `json:"mtu"`
		MAC  string `json:"ethernet_mac_address"`
	} `json:"links"`
	Networks []struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		Link      string `json:"link"`
		IPAddress string `json:"ip_address"`
		Netmask   string `json:"netmask"`
		Routes    []struct {
			Network string `json:"network"`
			Netmask string `json:"netmask"`
			Gateway string `json:"gateway"`
		} `json:"routes"`
		Services []struct {
			Type    string `json:"type"`
			Address string `json:"address"`
		} `json:"services"`
	} `json:"networks"`
	Services []struct {
		Type    string `json:"type"`
		Address string `json:"address"`
	} `json:"services"`
}

// checkNetworkData checks network_data.json against the spec's NICs: one
// link per NIC with its MAC (and MTU when it has static addresses), one
// static network per address with the default route and DNS servers, a
// DHCP network for a NIC without addresses.
func checkNetworkData(t *testing.T, where string, raw json.RawMessage, s testSpec) {
	t.Helper()
	var nd networkData
	if err := json.Unmarshal(raw, &nd); err != nil {
		t.Errorf("%s: %v: %s", where, err, raw)
		return
	}
	if len(nd.Links) != len(s.NICs) {
		t.Errorf("%s: %d links, want %d (one per NIC): %s", where, len(nd.Links), len(s.NICs), raw)
		return
	}
	wantDNS := map[string]bool{}
	for i, n := range s.NICs {
		l := nd.Links[i]
		if l.MAC != strings.ToLower(n.MAC) {
			t.Errorf("%s: links[%d].ethernet_mac_address = %q, want %q", where, i, l.MAC, strings.ToLower(n.MAC))
		}
		if len(n.IPs) > 0 && n.MTU > 0 && (l.MTU == nil || *l.MTU != n.MTU) {
			t.Errorf("%s: links[%d].mtu = %v, want %d", where, i, l.MTU, n.MTU)
		}
		var nets []int
		for j, nw := range nd.Networks {
			if nw.Link == l.ID {
				nets = append(nets, j)
			}
		}
		if len(n.IPs) == 0 {
			if len(nets) != 1 || nd.Networks[nets[0]].Type != "ipv4_dhcp" {
				t.Errorf("%s: NIC %s has no addresses and wants one ipv4_dhcp network, got networks %v: %s", where, n.MAC, nets, raw)
			}
			continue
		}
		if len(nets) != len(n.IPs) {
			t.Errorf("%s: NIC %s has %d addresses but %d networks: %s", where, n.MAC, len(n.IPs), len(nets), raw)
			continue
		}
		for k, ip := range n.IPs {
			nw := nd.Networks[nets[k]]
			if nw.Type != "ipv4" || nw.IPAddress != prefixAddr(t, ip.Address) || nw.Netmask != prefixMask(t, ip.Address) {
				t.Errorf("%s: network for %s = {type %q, ip_address %q, netmask %q}, want {ipv4, %s, %s}", where, ip.Address,
					nw.Type, nw.IPAddress, nw.Netmask, prefixAddr(t, ip.Address), prefixMask(t, ip.Address))
			}
			if ip.Gateway != "" {
				found := false
				for _, r := range nw.Routes {
					found = found || (r.Network == "0.0.0.0" && r.Netmask == "0.0.0.0" && r.Gateway == ip.Gateway)
				}
				if !found {
					t.Errorf("%s: network for %s has no default route via %s: %+v", where, ip.Address, ip.Gateway, nw.Routes)
				}
			}
			for _, d := range ip.DNS {
				wantDNS[d] = true
				found := false
				for _, sv := range nw.Services {
					found = found || (sv.Type == "dns" && sv.Address == d)
				}
				if !found {
					t.Errorf("%s: network for %s lacks dns service %s: %+v", where, ip.Address, d, nw.Services)
				}
			}
		}
	}
	for d := range wantDNS {
		found := false
		for _, sv := range nd.Services {
			found = found || (sv.Type == "dns" && sv.Address == d)
		}
		if !found {
			t.Errorf("%s: top-level services lack dns %s: %+v", where, d, nd.Services)
		}
	}
}

// checkNetConfig checks cloud-init's conversion of network_data.json: each
// NIC a physical interface named as in knownMACs, the static address with
// its netmask and gateway, DHCP for a NIC without addresses, and the DNS
// servers as nameserver entries.
func checkNetConfig(t *testing.T, where string, r cloudInitRead, s testSpec) {
	t.Helper()
	if r.NetConfigError != "" {
		t.Errorf("%s failed: %s", where, r.NetConfigError)
		return
	}
	nc := r.NetConfig
	if nc == nil || nc.Version != 1 {
		t.Errorf("%s: no network config v1: %+v", where, nc)
		return
	}
	names := s.knownMACs()
	nameservers := map[string]bool{}
	for _, c := range nc.Config {
		if c.Type == "nameserver" {
			nameservers[c.Address] = true
		}
	}
	for _, n := range s.NICs {
		mac := strings.ToLower(n.MAC)
		idx := -1
		for i, c := range nc.Config {
			if c.Type == "physical" && c.MACAddress == mac {
				idx = i
			}
		}
		if idx < 0 {
			t.Errorf("%s: no physical interface for %s: %+v", where, mac, nc.Config)
			continue
		}
		c := nc.Config[idx]
		if c.Name != names[mac] {
			t.Errorf("%s: interface %s named %q, want %q", where, mac, c.Name, names[mac])
		}
		if len(n.IPs) > 0 && n.MTU > 0 && (c.MTU == nil || *c.MTU != n.MTU) {
			t.Errorf("%s: interface %s mtu %v, want %d", where, mac, c.MTU, n.MTU)
		}
		if len(n.IPs) == 0 {
			if len(c.Subnets) != 1 || c.Subnets[0].Type != "dhcp4" {
				t.Errorf("%s: interface %s subnets %+v, want one dhcp4", where, mac, c.Subnets)
			}
			continue
		}
		for _, ip := range n.IPs {
			addr, mask := prefixAddr(t, ip.Address), prefixMask(t, ip.Address)
			found := false
			for _, sn := range c.Subnets {
				if sn.Type != "static" {
					continue
				}
				// cloud-init 22.4 keeps address and netmask apart;
				// newer releases may write address/prefix.
				if !(sn.Address == addr && sn.Netmask == mask) && sn.Address != ip.Address {
					continue
				}
				gw := sn.Gateway == ip.Gateway
				for _, rt := range sn.Routes {
					gw = gw || (rt.Network == "0.0.0.0" && rt.Gateway == ip.Gateway)
				}
				found = gw || ip.Gateway == ""
			}
			if !found {
				t.Errorf("%s: interface %s has no static subnet %s (netmask %s) via %s: %+v", where, mac, addr, mask, ip.Gateway, c.Subnets)
			}
			for _, d := range ip.DNS {
				if !nameservers[d] {
					t.Errorf("%s: no nameserver %s in %+v", where, d, nc.Config)
				}
			}
		}
	}
}

// metaDataDoc is the part of meta_data.json checked directly.
type metaDataDoc struct {
	UUID     string            `json:"uuid"`
	Hostname string            `json:"hostname"`
	Devices  json.RawMessage   `json:"devices"`
	Files    json.RawMessage   `json:"files"`
	Keys     map[string]string `json:"public_keys"`
}

func decodeMetaData(t testing.TB, where string, b []byte) metaDataDoc {
	t.Helper()
	var md metaDataDoc
	if err := json.Unmarshal(b, &md); err != nil {
		t.Fatalf("%s: %v: %s", where, err, b)
	}
	return md
}

// checkLatestMetaData checks a meta_data.json of version latest
// (2025-04-04): all devices, including the share device and the encrypted
// flags, which cloud-init never reads.
func checkLatestMetaData(t *testing.T, where string, b []byte, s testSpec) {
	t.Helper()
	md := decodeMetaData(t, where, b)
	if md.UUID != s.UUID {
		t.Errorf("%s: uuid %q, want %q", where, md.UUID, s.UUID)
	}
	checkDevices(t, where+": devices", md.Devices, s, "latest")

	// The same facts spelled out, so a failure reads plainly.
	var devs []device
	_ = json.Unmarshal(md.Devices, &devs)
	for _, sh := range s.Shares {
		found := false
		for _, d := range devs {
			found = found || (d.Type == "share" && d.ShareID == sh.ShareID && d.Tag == sh.Tag)
		}
		if !found {
			t.Errorf("%s: no share device for share %s (tag %s): %s", where, sh.ShareID, sh.Tag, md.Devices)
		}
	}
	// Without a hypervisor no disk is created, so none is encrypted: a
	// spec's encrypted: true is a request and is never published as is.
	for _, k := range s.Disks {
		if !k.Encrypted {
			continue
		}
		for _, d := range devs {
			if d.Type == "disk" && d.Serial == k.Serial && d.Encrypted != nil && *d.Encrypted {
				t.Errorf("%s: disk %s (serial %s) requested encrypted is published encrypted:true by a daemon that created no disk: %s", where, k.Name, k.Serial, md.Devices)
			}
		}
	}
}

func TestConfigDriveCloudInit(t *testing.T) {
	t.Parallel()
	requireCloudInit(t)
	xorriso := testenv.LookPath(t, "xorriso")
	isoinfo := testenv.LookPath(t, "isoinfo")
	mcopy := testenv.LookPath(t, "mcopy")
	blkid := testenv.LookPath(t, "blkid")

	spec := webSpec("5b2f8c1e-7d4a-4e21-9c3b-8a1f0e6d2c47")
	s := parseTestSpec(t, spec)
	d := startDaemon(t, daemonOptions{})
	d.Apply(spec)
	work := t.TempDir()

	unpackISO := func(t *testing.T, iso, dir string) {
		t.Helper()
		if r := runCmd(t, testenv.ChildEnv(nil), xorriso, "-osirrox", "on", "-indev", iso, "-extract", "/", dir); r.code != 0 {
			t.Fatalf("unpack %s: %s", iso, r)
		}
	}
	readFile := func(t *testing.T, p string) []byte {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("config drive: %v", err)
		}
		return b
	}
	checkLabel := func(t *testing.T, img, fstype string) {
		t.Helper()
		// cloud-init finds the drive by label (blkid LABEL=config-2).
		r := runCmd(t, testenv.ChildEnv(nil), blkid, "-p", "-o", "export", img)
		if r.code != 0 {
			t.Fatalf("%s", r)
		}
		for _, want := range []string{"LABEL=config-2", "TYPE=" + fstype} {
			if !strings.Contains(r.stdout, want+"\n") {
				t.Errorf("blkid %s: want %s in\n%s", img, want, r.stdout)
			}
		}
	}

	var isoLatest []byte
	t.Run("iso9660", func(t *testing.T) {
		iso := filepath.Join(work, "drive.iso")
		d.MustCtl("configdrive", "build", "web-1", "-o", iso)
		checkLabel(t, iso, "iso9660")

		r := runCmd(t, testenv.ChildEnv(nil), isoinfo, "-R", "-f", "-i", iso)
		if r.code != 0 {
			t.Fatalf("%s", r)
		}
		listed := map[string]bool{}
		for _, l := range strings.Split(r.stdout, "\n") {
			listed[strings.TrimSpace(l)] = true
		}
		for _, p := range []string{
			"/openstack/latest/meta_data.json", "/openstack/latest/user_data", "/openstack/latest/network_data.json",
			"/openstack/2018-08-27/meta_data.json", "/openstack/2025-04-04/meta_data.json", "/openstack/content/0000",
			"/ec2/latest/meta-data.json", "/ec2/2009-04-04/meta-data.json",
		} {
			if !listed[p] {
				t.Errorf("isoinfo -R -f does not list %s (Rock Ridge names); it lists:\n%s", p, r.stdout)
			}
		}
		if listed["/openstack/latest/password"] || listed["/ec2/2008-09-01/meta-data.json"] {
			t.Errorf("drive holds a password file or an EC2 version Nova skips:\n%s", r.stdout)
		}

		dir := filepath.Join(work, "iso")
		unpackISO(t, iso, dir)
		ci := readWithCloudInit(t, "drive", dir, s)
		checkCloudInitRead(t, "cloud-init ConfigDriveReader (iso9660)", ci, s, true)

		isoLatest = readFile(t, filepath.Join(dir, "openstack", "latest", "meta_data.json"))
		checkLatestMetaData(t, "iso9660 openstack/latest/meta_data.json", isoLatest, s)
		checkLatestMetaData(t, "iso9660 openstack/2025-04-04/meta_data.json",
			readFile(t, filepath.Join(dir, "openstack", "2025-04-04", "meta_data.json")), s)
		checkDevices(t, "iso9660 openstack/2018-08-27/meta_data.json: devices",
			decodeMetaData(t, "2018-08-27", readFile(t, filepath.Join(dir, "openstack", "2018-08-27", "meta_data.json"))).Devices,
			s, "2018-08-27")
	})

	t.Run("vfat", func(t *testing.T) {
		img := filepath.Join(work, "drive.img")
		d.MustCtl("configdrive", "build", "web-1", "-o", img, "--format", "vfat")
		checkLabel(t, img, "vfat")

		dir := filepath.Join(work, "vfat")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if r := runCmd(t, testenv.ChildEnv(nil, "MTOOLS_SKIP_CHECK=1"), mcopy, "-s", "-n", "-i", img, "::/", dir); r.code != 0 {
			t.Fatalf("unpack %s: %s", img, r)
		}
		ci := readWithCloudInit(t, "drive", dir, s)
		checkCloudInitRead(t, "cloud-init ConfigDriveReader (vfat)", ci, s, true)

		latest := readFile(t, filepath.Join(dir, "openstack", "latest", "meta_data.json"))
		checkLatestMetaData(t, "vfat openstack/latest/meta_data.json", latest, s)
		if isoLatest != nil && !bytes.Equal(latest, isoLatest) {
			t.Errorf("vfat and iso9660 drives of the same published tree differ in openstack/latest/meta_data.json:\nvfat %s\niso  %s", latest, isoLatest)
		}
	})

	t.Run("kept drive", func(t *testing.T) {
		// The daemon keeps a drive per instance in its data directory
		// (what a hypervisor attaches); it holds the same tree.
		var inst instanceJSON
		decodeJSON(t, d.MustCtl("instance", "show", "web-1", "--output", "json").stdout, &inst)
		want := filepath.Join(d.DataDir, "instances", "web-1", "disk.config")
		if inst.ConfigDrive != want {
			t.Fatalf("show: config_drive = %q, want %q", inst.ConfigDrive, want)
		}
		checkLabel(t, want, "iso9660")
		dir := filepath.Join(work, "kept")
		unpackISO(t, want, dir)
		ci := readWithCloudInit(t, "drive", dir, s)
		checkCloudInitRead(t, "cloud-init ConfigDriveReader (kept disk.config)", ci, s, true)
		latest := readFile(t, filepath.Join(dir, "openstack", "latest", "meta_data.json"))
		checkLatestMetaData(t, "kept disk.config openstack/latest/meta_data.json", latest, s)
		if isoLatest != nil && !bytes.Equal(latest, isoLatest) {
			t.Errorf("kept drive and built drive differ in openstack/latest/meta_data.json:\nkept  %s\nbuilt %s", latest, isoLatest)
		}
	})
}

func TestMetadataServiceCloudInit(t *testing.T) {
	t.Parallel()
	requireCloudInit(t)

	spec := webSpec("0e9d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b")
	s := parseTestSpec(t, spec)
	d := startDaemon(t, daemonOptions{})
	d.Apply(spec)

	t.Run("cloud-init", func(t *testing.T) {
		ci := readWithCloudInit(t, "service", d.URL(), s)
		checkCloudInitRead(t, "cloud-init MetadataReader", ci, s, false)
	})

	t.Run("http", func(t *testing.T) {
		url := d.URL()

		r := getFrom(t, "127.0.0.1", url+"/openstack/latest/meta_data.json")
		if r.status != http.StatusOK {
			t.Fatalf("GET /openstack/latest/meta_data.json: status %d: %s", r.status, r.body)
		}
		if r.contentType != "application/json" {
			t.Errorf("GET /openstack/latest/meta_data.json: Content-Type %q, want application/json", r.contentType)
		}
		checkLatestMetaData(t, "GET /openstack/latest/meta_data.json", r.body, s)
		if md := decodeMetaData(t, "meta_data.json", r.body); len(md.Files) > 0 {
			t.Errorf("GET /openstack/latest/meta_data.json lists injected files %s; like Nova, injected files belong on the config drive only (internal/model.Instance.Files)", md.Files)
		}
		if r := getFrom(t, "127.0.0.1", url+"/openstack/content/0000"); r.status != http.StatusNotFound {
			t.Errorf("GET /openstack/content/0000: status %d (body %q), want 404: injected file content belongs on the config drive only", r.status, r.body)
		}

		listing := string(mustGet(t, url+"/openstack"))
		for _, v := range []string{"2012-08-10", cloudInitVersion, "2025-04-04", "latest"} {
			if !strings.Contains("\n"+listing+"\n", "\n"+v+"\n") {
				t.Errorf("GET /openstack does not list %s:\n%s", v, listing)
			}
		}
		if got := string(mustGet(t, url+"/openstack/latest/user_data")); got != s.UserData {
			t.Errorf("GET /openstack/latest/user_data = %q, want %q", got, s.UserData)
		}
		if got := string(mustGet(t, url+"/latest/meta-data/hostname")); got != s.fqdn() {
			t.Errorf("GET /latest/meta-data/hostname = %q, want %q", got, s.fqdn())
		}
		if got := string(mustGet(t, url+"/latest/meta-data/public-keys/0/openssh-key")); got != s.PublicKeys[0].Data {
			t.Errorf("GET /latest/meta-data/public-keys/0/openssh-key = %q, want %q", got, s.PublicKeys[0].Data)
		}
		if got := string(mustGet(t, url+"/latest/meta-data/public-keys/")); !strings.HasPrefix(got, "0="+s.PublicKeys[0].Name) {
			t.Errorf("GET /latest/meta-data/public-keys/ = %q, want 0=%s first", got, s.PublicKeys[0].Name)
		}
		if got := string(mustGet(t, url+"/latest/user-data")); got != s.UserData {
			t.Errorf("GET /latest/user-data = %q, want %q", got, s.UserData)
		}

		for _, p := range []string{"/openstack/latest/no_such_file.json", "/latest/meta-data/no-such-key", "/openstack/1999-01-01/meta_data.json"} {
			if r := getFrom(t, "127.0.0.1", url+p); r.status != http.StatusNotFound {
				t.Errorf("GET %s: status %d (body %q), want 404", p, r.status, r.body)
			}
		}
		// 127.0.0.2 is loopback too, but no instance has it.
		for _, p := range []string{"/openstack/latest/meta_data.json", "/openstack", "/latest/meta-data/hostname"} {
			if r := getFrom(t, "127.0.0.2", url+p); r.status != http.StatusNotFound {
				t.Errorf("GET %s from 127.0.0.2 (no instance's address): status %d (body %q), want 404", p, r.status, r.body)
			}
		}
	})
}
