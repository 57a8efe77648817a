package e2e

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// webSpecYAML is examples/web.yaml with a few additions that exercise more
// of the published metadata: an untagged encrypted disk (listed only from
// 2025-04-04), a SATA disk (reported on the scsi bus), an MTU, a trusted VF,
// an injected file, user data with non-ASCII bytes, and two passthrough
// devices, one tagged (a pci device from 2025-04-04) and one not (never
// listed). {{UUID}} is
// replaced by the test's own UUID.
const webSpecYAML = `# derived from examples/web.yaml
name: web-1
uuid: {{UUID}}
hostname: web-1
project_id: demo
availability_zone: nova
flavor: m1.small
image: debian-12
addresses: [127.0.0.1]
meta:
  role: webserver
public_keys:
  - name: demo
    data: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGj8cJb0mJm3nWq0ZkKqJbq6Gf0x2Z1Zs8c6s6j8c9Xx demo@vmeta
  - name: backup
    data: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBackupKeyBackupKeyBackupKeyBackupKeyBack backup@vmeta
user_data: |
  #cloud-config
  # héllo ✓ — user data must reach the guest byte for byte
  runcmd:
    - echo hello from vmeta
files:
  - path: /etc/motd
    content: "welcome to web-1\n"
disks:
  - name: vda
    bus: virtio
    address: "0000:00:04.0"
    serial: root-disk
  - name: vdb
    bus: virtio
    address: "0000:00:05.0"
    serial: squid-cache
    tag: squidcache
    size: 10G
    encrypted: true
  - name: sda
    bus: scsi
    address: "0:0:0:1"
    serial: oracle-data
    tag: oracledb
  - name: vdc
    bus: virtio
    address: "0000:00:06.0"
    serial: scratch
    encrypted: true
  - name: sdb
    bus: sata
    address: "0:0:1:0"
    serial: backup-disk
    tag: backup
nics:
  - mac: "52:54:00:12:34:56"
    address: "0000:00:02.0"
    tag: nfvfunc1
    mtu: 9000
    ips:
      - address: 192.168.122.10/24
        gateway: 192.168.122.1
        dns: [192.168.122.1]
  - mac: "52:54:00:12:34:57"
    address: "0000:00:03.0"
    tag: nfvfunc2
    vlan: 100
    vf_trusted: true
pci_devices:
  - address: "0000:af:10.7"
    tag: scratch-nvme
    guest_address: "0000:00:10.0"
  - address: "0000:af:10.6"
`

// webSpec returns the web spec with uuid.
func webSpec(uuid string) string { return strings.ReplaceAll(webSpecYAML, "{{UUID}}", uuid) }

// testSpec is the part of an instance spec the tests derive expectations
// from. It is the tests' own reading of the spec format, independent of
// internal/model.
type testSpec struct {
	Name             string            `json:"name"`
	UUID             string            `json:"uuid"`
	Hostname         string            `json:"hostname"`
	ProjectID        string            `json:"project_id"`
	AvailabilityZone string            `json:"availability_zone"`
	Flavor           string            `json:"flavor"`
	Image            string            `json:"image"`
	Addresses        []string          `json:"addresses"`
	Meta             map[string]string `json:"meta"`
	PublicKeys       []struct {
		Name string `json:"name"`
		Data string `json:"data"`
	} `json:"public_keys"`
	UserData string `json:"user_data"`
	Files    []struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	} `json:"files"`
	Disks []struct {
		Name      string `json:"name"`
		Bus       string `json:"bus"`
		Address   string `json:"address"`
		Serial    string `json:"serial"`
		Tag       string `json:"tag"`
		Size      string `json:"size"`
		Encrypted bool   `json:"encrypted"`
	} `json:"disks"`
	NICs []struct {
		MAC       string `json:"mac"`
		Bus       string `json:"bus"`
		Address   string `json:"address"`
		Tag       string `json:"tag"`
		VLAN      *int   `json:"vlan"`
		VFTrusted bool   `json:"vf_trusted"`
		MTU       int    `json:"mtu"`
		IPs       []struct {
			Address string   `json:"address"`
			Gateway string   `json:"gateway"`
			DNS     []string `json:"dns"`
		} `json:"ips"`
	} `json:"nics"`
	Shares []struct {
		ShareID string `json:"share_id"`
		Tag     string `json:"tag"`
		Source  string `json:"source"`
	} `json:"shares"`
	PCIDevices []struct {
		Address      string `json:"address"`
		Tag          string `json:"tag"`
		GuestAddress string `json:"guest_address"`
	} `json:"pci_devices"`
}

func parseTestSpec(t testing.TB, spec string) testSpec {
	t.Helper()
	var s testSpec
	if err := yaml.UnmarshalStrict([]byte(spec), &s); err != nil {
		t.Fatalf("parse test spec: %v", err)
	}
	return s
}

// specMap returns spec as a generic document, for tests that break it.
func specMap(t testing.TB, spec string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(spec), &m); err != nil {
		t.Fatalf("parse test spec: %v", err)
	}
	return m
}

// fqdn is the hostname the metadata carries: Nova appends its dhcp_domain
// ("novalocal", hostctl's default) to a hostname without a dot.
func (s testSpec) fqdn() string {
	h := s.Hostname
	if h == "" {
		h = s.Name
	}
	if strings.Contains(h, ".") {
		return h
	}
	return h + ".novalocal"
}

// publicKeys is meta_data.json's public_keys map.
func (s testSpec) publicKeys() map[string]string {
	m := map[string]string{}
	for _, k := range s.PublicKeys {
		m[k.Name] = k.Data
	}
	return m
}

// knownMACs names the spec's NICs eth0, eth1, … in order, for
// convert_net_json.
func (s testSpec) knownMACs() map[string]string {
	m := map[string]string{}
	for i, n := range s.NICs {
		m[strings.ToLower(n.MAC)] = fmt.Sprintf("eth%d", i)
	}
	return m
}

// device is one entry of a meta_data.json devices list. Optional keys are
// pointers so that absence and zero values differ.
type device struct {
	Type      string   `json:"type"`
	Bus       string   `json:"bus"`
	Address   string   `json:"address"`
	MAC       string   `json:"mac,omitempty"`
	Serial    string   `json:"serial,omitempty"`
	Tags      []string `json:"tags,omitempty"`
	VLAN      *int     `json:"vlan,omitempty"`
	VFTrusted *bool    `json:"vf_trusted,omitempty"`
	Encrypted *bool    `json:"encrypted,omitempty"`
	ShareID   string   `json:"share_id,omitempty"`
	Tag       string   `json:"tag,omitempty"`
}

func (d device) key() string {
	switch d.Type {
	case "nic":
		return "nic " + d.MAC
	case "disk":
		return "disk " + d.Serial
	case "share":
		return "share " + d.ShareID
	case "pci":
		return "pci " + strings.Join(d.Tags, ",")
	}
	return d.Type + " ?"
}

func (d device) String() string {
	b, _ := json.Marshal(d)
	return string(b)
}

// expectedDevices computes, from the spec alone, the devices list the
// guest must see at an OpenStack metadata version ("2018-08-27" is the one
// cloud-init reads; "latest" is 2025-04-04). The rules are Nova's
// (nova/api/metadata/base.py, libvirt _build_device_metadata) plus vmeta's
// documented 2025-04-04 additions:
//
//   - every NIC from 2018-08-27 on (vf_trusted is always emitted), tags
//     when tagged, vlan when set;
//   - disks only when tagged, with the metadata bus (virtio-blk is a PCI
//     function, SATA disks are reported on scsi);
//   - from 2025-04-04: "encrypted" on every listed disk, untagged encrypted
//     disks listed too, and one "share" device per share (bus and address
//     "none", tag defaulting to the share id), and one "pci" device per
//     tagged passthrough device (bus pci, its guest address, its tag;
//     nothing of the host device).
//
// These daemons run without a hypervisor (--virt none): they create no
// disks, so no disk is encrypted and "encrypted" is false whatever the
// spec requests (a spec's encrypted: true is a request, published only
// once hostctl made the disk LUKS; see test/guestvm).
func expectedDevices(s testSpec, version string) []device {
	epoxy := version == "latest" || version >= "2025-04-04"
	var out []device
	for _, n := range s.NICs {
		d := device{Type: "nic", Bus: orDefault(n.Bus, "pci"), Address: orDefault(strings.ToLower(n.Address), "none"), MAC: strings.ToLower(n.MAC)}
		if n.Tag != "" {
			d.Tags = []string{n.Tag}
		}
		if n.VLAN != nil {
			v := *n.VLAN
			d.VLAN = &v
		}
		trusted := n.VFTrusted
		d.VFTrusted = &trusted
		out = append(out, d)
	}
	for _, k := range s.Disks {
		k.Encrypted = false // --virt none: never published encrypted
		if k.Tag == "" && !(epoxy && k.Encrypted) {
			continue
		}
		bus := k.Bus
		switch bus {
		case "", "virtio":
			bus = "pci"
		case "sata":
			bus = "scsi"
		}
		d := device{Type: "disk", Bus: bus, Address: orDefault(strings.ToLower(k.Address), "none"), Serial: k.Serial}
		if k.Tag != "" {
			d.Tags = []string{k.Tag}
		}
		if epoxy {
			enc := k.Encrypted
			d.Encrypted = &enc
		}
		out = append(out, d)
	}
	if epoxy {
		for _, sh := range s.Shares {
			id := strings.ToLower(sh.ShareID)
			out = append(out, device{Type: "share", Bus: "none", Address: "none", ShareID: id, Tag: orDefault(sh.Tag, id)})
		}
		for _, p := range s.PCIDevices {
			if p.Tag != "" {
				out = append(out, device{Type: "pci", Bus: "pci", Address: orDefault(p.GuestAddress, "none"), Tags: []string{p.Tag}})
			}
		}
	}
	return out
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// allowedDeviceKeys are the keys each device type may carry at a version.
func allowedDeviceKeys(typ, version string) map[string]bool {
	epoxy := version == "latest" || version >= "2025-04-04"
	keys := map[string][]string{
		"nic":  {"type", "bus", "address", "mac", "tags", "vlan", "vf_trusted"},
		"disk": {"type", "bus", "address", "serial", "path", "tags"},
	}
	if epoxy {
		keys["disk"] = append(keys["disk"], "encrypted")
		keys["share"] = []string{"type", "bus", "address", "share_id", "tag"}
		keys["pci"] = []string{"type", "bus", "address", "tags"}
	}
	m := map[string]bool{}
	for _, k := range keys[typ] {
		m[k] = true
	}
	return m
}

// checkDevices compares a devices list (raw JSON, as published or as
// cloud-init returned it) with what the spec implies at version. Devices
// are matched by identity (MAC, serial, share id), not by position.
func checkDevices(t testing.TB, where string, raw json.RawMessage, s testSpec, version string) {
	t.Helper()
	if len(raw) == 0 || string(raw) == "null" {
		t.Errorf("%s: no devices list", where)
		return
	}
	var generic []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Errorf("%s: devices is not a list of objects: %v: %s", where, err, raw)
		return
	}
	var got []device
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Errorf("%s: decode devices: %v: %s", where, err, raw)
		return
	}
	for i, g := range generic {
		var typ string
		_ = json.Unmarshal(g["type"], &typ)
		allowed := allowedDeviceKeys(typ, version)
		if len(allowed) == 0 {
			t.Errorf("%s: devices[%d] has type %q, which version %s does not define: %s", where, i, typ, version, raw)
			continue
		}
		var extra []string
		for k := range g {
			if !allowed[k] {
				extra = append(extra, k)
			}
		}
		sort.Strings(extra)
		if len(extra) > 0 {
			t.Errorf("%s: devices[%d] (%s) has keys %v not defined for %s at version %s", where, i, got[i], extra, typ, version)
		}
	}

	want := expectedDevices(s, version)
	byKey := map[string]device{}
	for _, g := range got {
		if _, dup := byKey[g.key()]; dup {
			t.Errorf("%s: device %s listed twice", where, g.key())
		}
		byKey[g.key()] = g
	}
	for _, w := range want {
		g, ok := byKey[w.key()]
		if !ok {
			t.Errorf("%s: missing device %s\nwant %s", where, w.key(), w)
			continue
		}
		delete(byKey, w.key())
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s: device %s\n got %s\nwant %s", where, w.key(), g, w)
		}
	}
	for k, g := range byKey {
		t.Errorf("%s: unexpected device %s: %s", where, k, g)
	}
}
