// Package metadata renders an instance into the guest-visible metadata tree
// Nova would publish for it: every OpenStack version up to 2025-04-04 plus
// "latest" (meta_data.json, user_data, vendor_data.json, vendor_data2.json,
// network_data.json, content blobs) and every EC2 version plus "latest".
//
// The tree is rendered once per change and then only served: the metadata
// service and the config drive builder read the same Tree. Every devices
// list is checked against the device-role-tagging schema of its version
// before a tree is returned, so an invalid document is never published.
package metadata

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"path"
	"slices"
	"strings"

	"github.com/vmeta/vmeta/internal/metadata/wire"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/schema"
)

// Options tune rendering.
type Options struct {
	// DHCPDomain is appended to short hostnames (Nova's [api]dhcp_domain;
	// default "novalocal"). Set NoDHCPDomain to append nothing.
	DHCPDomain   string
	NoDHCPDomain bool
	// Rand supplies random_seed bytes; crypto/rand when nil.
	Rand io.Reader
	// Revision, when positive, is the metadata revision the publish of
	// this tree creates (the instance record's revision): it is written as
	// RevisionKey into openstack/latest/meta_data.json, so a guest that
	// can read the metadata from several transports (firmware, config
	// drive, metadata service) tells the newest. The dated versions stay
	// exactly Nova's.
	Revision int64
}

// randomSeedBytes is the size of Nova's random_seed (os.urandom(512)).
const randomSeedBytes = 512

// Render renders the whole tree of a normalized, validated instance whose
// UUID is set.
func Render(in *model.Instance, opts Options) (*Tree, error) {
	if in.UUID == "" {
		return nil, fmt.Errorf("render %s: instance has no uuid", in.Name)
	}
	r := opts.Rand
	if r == nil {
		r = rand.Reader
	}
	seed := make([]byte, randomSeedBytes)
	if _, err := io.ReadFull(r, seed); err != nil {
		return nil, fmt.Errorf("render %s: random seed: %w", in.Name, err)
	}
	if opts.Revision < 0 {
		return nil, fmt.Errorf("render %s: revision %d: must not be negative", in.Name, opts.Revision)
	}
	rd := &renderer{in: in, hostname: hostname(in, opts), seed: base64.StdEncoding.EncodeToString(seed), revision: opts.Revision}
	t := &Tree{Files: make(map[string][]byte, 96)}

	// Content blobs: injected files, referenced from the drive's
	// meta_data.json only.
	if len(in.Files) > 0 {
		t.DriveOnly = make(map[string][]byte, len(in.Files)+11)
	}
	for i, f := range in.Files {
		t.DriveOnly[path.Join("openstack", ContentPath(i))] = []byte(f.Content)
	}
	netData, err := json.Marshal(networkData(in))
	if err != nil {
		return nil, fmt.Errorf("render %s: network_data.json: %w", in.Name, err)
	}
	vendor := in.VendorData
	if vendor == nil {
		vendor = map[string]any{}
	}
	vendorData, err := json.Marshal(vendor)
	if err != nil {
		return nil, fmt.Errorf("render %s: vendor_data.json: %w", in.Name, err)
	}
	vendorData2, err := json.Marshal(map[string]any{"static": vendor})
	if err != nil {
		return nil, fmt.Errorf("render %s: vendor_data2.json: %w", in.Name, err)
	}

	for _, v := range append(append([]string(nil), OpenStackVersions...), "latest") {
		dir := "openstack/" + v + "/"
		md, err := rd.metaData(v, false)
		if err != nil {
			return nil, fmt.Errorf("render %s: openstack/%s: %w", in.Name, v, err)
		}
		t.Files[dir+"meta_data.json"] = md
		if len(in.Files) > 0 {
			if t.DriveOnly[dir+"meta_data.json"], err = rd.metaData(v, true); err != nil {
				return nil, fmt.Errorf("render %s: openstack/%s: %w", in.Name, v, err)
			}
		}
		if in.UserData != "" {
			t.Files[dir+"user_data"] = []byte(in.UserData)
		}
		if atLeast(v, Havana) {
			t.Files[dir+"vendor_data.json"] = vendorData
		}
		if atLeast(v, Liberty) {
			t.Files[dir+"network_data.json"] = netData
		}
		if atLeast(v, NewtonTwo) {
			t.Files[dir+"vendor_data2.json"] = vendorData2
		}
	}

	for _, v := range append(append([]string(nil), EC2Versions...), "latest") {
		b, err := json.Marshal(rd.ec2MetaData(v))
		if err != nil {
			return nil, fmt.Errorf("render %s: ec2/%s: %w", in.Name, v, err)
		}
		t.Files["ec2/"+v+"/meta-data.json"] = b
		if in.UserData != "" {
			t.Files["ec2/"+v+"/user-data"] = []byte(in.UserData)
		}
	}
	return t, nil
}

// ContentPath is the path, relative to openstack/, of the i-th content blob
// ("content/0000"), as Nova numbers them.
func ContentPath(i int) string { return fmt.Sprintf("content/%04d", i) }

// hostname is Nova's _get_hostname: the instance hostname plus the DHCP
// domain. A hostname that already has a dot is taken as fully qualified.
func hostname(in *model.Instance, opts Options) string {
	h := in.Hostname
	if h == "" {
		h = in.Name
	}
	if opts.NoDHCPDomain || strings.Contains(h, ".") {
		return h
	}
	domain := opts.DHCPDomain
	if domain == "" {
		domain = "novalocal"
	}
	return h + "." + domain
}

type renderer struct {
	in       *model.Instance
	hostname string
	seed     string
	revision int64
	// validated remembers devices documents already checked in this
	// render: most versions share the same list, and a schema check costs
	// far more than rendering.
	validated map[string]bool
}

// metaDataDoc is meta_data.json; the field order is Nova's.
type metaDataDoc struct {
	UUID             string            `json:"uuid"`
	Meta             map[string]string `json:"meta,omitempty"`
	Files            []fileRef         `json:"files,omitempty"`
	PublicKeys       map[string]string `json:"public_keys,omitempty"`
	Keys             []keyDoc          `json:"keys,omitempty"`
	Hostname         string            `json:"hostname"`
	Name             string            `json:"name"`
	LaunchIndex      int               `json:"launch_index"`
	AvailabilityZone string            `json:"availability_zone"`
	RandomSeed       string            `json:"random_seed,omitempty"`
	ProjectID        *string           `json:"project_id,omitempty"`
	// Pointers, so that an empty list is still emitted from the version
	// that adds the key (Nova always emits it, [] when empty).
	Devices       *[]Device `json:"devices,omitempty"`
	DedicatedCPUs *[]int    `json:"dedicated_cpus,omitempty"`
	// Revision is vmeta's (RevisionKey), in "latest" only.
	Revision int64 `json:"vmeta_revision,omitempty"`
}

// RevisionKey is the key of openstack/latest/meta_data.json that carries
// the metadata revision (Options.Revision); see wire.RevisionKey.
const RevisionKey = wire.RevisionKey

type fileRef struct {
	Path        string `json:"path"`
	ContentPath string `json:"content_path"`
}

type keyDoc struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Data string `json:"data"`
}

// metaData renders meta_data.json of version v; withFiles adds the
// injected files, for the config drive.
func (r *renderer) metaData(v string, withFiles bool) ([]byte, error) {
	in := r.in
	az := in.AvailabilityZone
	if az == "" {
		az = "nova"
	}
	md := metaDataDoc{
		UUID:             in.UUID,
		Meta:             in.Meta,
		Hostname:         r.hostname,
		Name:             in.Name,
		LaunchIndex:      in.LaunchIndex,
		AvailabilityZone: az,
	}
	if withFiles {
		for i, f := range in.Files {
			md.Files = append(md.Files, fileRef{Path: f.Path, ContentPath: "/" + ContentPath(i)})
		}
	}
	if len(in.PublicKeys) > 0 {
		md.PublicKeys = make(map[string]string, len(in.PublicKeys))
		for _, k := range in.PublicKeys {
			typ := k.Type
			if typ == "" {
				typ = "ssh"
			}
			md.PublicKeys[k.Name] = k.Data
			md.Keys = append(md.Keys, keyDoc{Name: k.Name, Type: typ, Data: k.Data})
		}
	}
	if atLeast(v, Grizzly) {
		md.RandomSeed = r.seed
	}
	if atLeast(v, Liberty) {
		pid := in.ProjectID
		md.ProjectID = &pid
	}
	if atLeast(v, NewtonOne) {
		devs := devices(in, v)
		if err := r.validate(v, devs); err != nil {
			return nil, err
		}
		if devs == nil {
			devs = []Device{}
		}
		md.Devices = &devs
	}
	if atLeast(v, Victoria) {
		cpus := append([]int{}, in.DedicatedCPUs...)
		md.DedicatedCPUs = &cpus
	}
	if v == "latest" {
		md.Revision = r.revision
	}
	return json.Marshal(md)
}

// Device is one entry of the devices list (the device-role-tagging
// document); see wire.Device, which guests read without this package.
type Device = wire.Device

// DevicesSchema returns the device-role-tagging schema that describes the
// devices list of an OpenStack version: 1.0 up to 2020-10-14, and from
// 2025-04-04 on the append-only 1.2 (disk "encrypted", share devices,
// tagged pci devices), which accepts every 1.1 document.
func DevicesSchema(v string) schema.Kind {
	if atLeast(v, Epoxy) {
		return schema.DevicesV12
	}
	return schema.DevicesV1
}

// Devices renders the devices list of an instance as version v shows it, and
// validates it against that version's schema. It follows Nova's rules
// (nova/api/metadata/base.py _get_device_metadata):
//
//   - NICs: vlan from 2017-02-22 when set; vf_trusted (default false)
//     always from 2018-08-27; a NIC with no tags and neither key emitted is
//     left out, so before 2018-08-27 untagged NICs without a VLAN are
//     omitted and from then on every NIC appears.
//   - Disks: only tagged disks, as the libvirt driver emits them. From
//     2025-04-04 each carries vmeta's "encrypted" boolean, and untagged
//     encrypted disks are listed too, so a guest learns every disk that is
//     encrypted at rest.
//   - Shares: only from 2025-04-04, with bus and address "none".
//   - PCI passthrough devices: only tagged ones, only from 2025-04-04, as
//     type "pci" on bus "pci" with their guest address ("none" when it is
//     not known). Nothing about the host device (its address, one-time
//     use, burning) is shown.
func Devices(in *model.Instance, v string) ([]Device, error) {
	devs := devices(in, v)
	if err := ValidateDevices(v, devs); err != nil {
		return nil, err
	}
	return devs, nil
}

func devices(in *model.Instance, v string) []Device {
	var devs []Device
	epoxy := atLeast(v, Epoxy)
	for _, n := range in.NICs {
		d := Device{Type: "nic", Bus: n.Bus, Address: orNone(n.Address), MAC: n.MAC}
		if d.Bus == "" {
			d.Bus = "pci"
		}
		if n.Tag != "" {
			d.Tags = []string{n.Tag}
		}
		if atLeast(v, Ocata) && n.VLAN != nil {
			vlan := *n.VLAN
			d.VLAN = &vlan
		}
		if atLeast(v, Rocky) {
			trusted := n.VFTrusted
			d.VFTrusted = &trusted
		}
		if d.Tags == nil && d.VLAN == nil && d.VFTrusted == nil {
			continue
		}
		devs = append(devs, d)
	}
	for _, k := range in.Disks {
		if k.Tag == "" && !(epoxy && k.Encrypted) {
			continue
		}
		d := Device{Type: "disk", Bus: model.MetadataBus(k.Bus), Address: orNone(k.Address), Serial: k.Serial}
		if k.Tag != "" {
			d.Tags = []string{k.Tag}
		}
		if epoxy {
			enc := k.Encrypted
			d.Encrypted = &enc
		}
		devs = append(devs, d)
	}
	if epoxy {
		for _, s := range in.Shares {
			devs = append(devs, Device{Type: "share", Bus: "none", Address: "none", ShareID: s.ShareID, Tag: s.EffectiveTag()})
		}
		for _, p := range in.PCIDevices {
			if p.Tag == "" {
				continue
			}
			devs = append(devs, Device{Type: "pci", Bus: "pci", Address: orNone(p.GuestAddress), Tags: []string{p.Tag}})
		}
	}
	return devs
}

// validate is ValidateDevices, memoized per schema and document.
func (r *renderer) validate(v string, devs []Device) error {
	doc, err := devicesDocument(devs)
	if err != nil {
		return err
	}
	key := string(DevicesSchema(v)) + "\x00" + string(doc)
	if r.validated[key] {
		return nil
	}
	if err := schema.ValidateJSON(DevicesSchema(v), doc); err != nil {
		return fmt.Errorf("devices document refused: %w", err)
	}
	if r.validated == nil {
		r.validated = map[string]bool{}
	}
	r.validated[key] = true
	return nil
}

// ValidateDevices checks a devices list against the schema of version v.
func ValidateDevices(v string, devs []Device) error {
	b, err := devicesDocument(devs)
	if err != nil {
		return err
	}
	if err := schema.ValidateJSON(DevicesSchema(v), b); err != nil {
		return fmt.Errorf("devices document refused: %w", err)
	}
	return nil
}

// devicesDocument is the device-role-tagging document {"devices": [...]}.
func devicesDocument(devs []Device) ([]byte, error) {
	if devs == nil {
		devs = []Device{}
	}
	b, err := json.Marshal(struct {
		Devices []Device `json:"devices"`
	}{devs})
	if err != nil {
		return nil, fmt.Errorf("encode devices: %w", err)
	}
	return b, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// stableID derives a short, stable hex id from the instance UUID and a
// purpose, for identifiers Nova keeps in its database (EC2 ids, VIF ids).
func stableID(uuid, purpose string) string {
	h := sha1.Sum([]byte(purpose + "\x00" + uuid))
	return hex.EncodeToString(h[:])
}

// stableUUID formats a stable id as a UUID (version 5 layout).
func stableUUID(uuid, purpose string) string {
	h := sha1.Sum([]byte(purpose + "\x00" + uuid))
	h[6] = (h[6] & 0x0f) | 0x50
	h[8] = (h[8] & 0x3f) | 0x80
	x := hex.EncodeToString(h[:16])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// EC2 ids: Nova formats database ids as i-%08x / ami-%08x / r-%08x; vmeta
// has no database ids and derives them from the instance UUID.
func ec2ID(prefix, uuid string) string { return prefix + stableID(uuid, prefix)[:8] }

func (r *renderer) ec2MetaData(v string) map[string]any {
	in := r.in
	if v == "latest" {
		v = EC2Latest
	}
	localIPv4 := ""
	for _, n := range in.NICs {
		for _, ip := range n.IPs {
			if p, err := netip.ParsePrefix(ip.Address); err == nil && p.Addr().Is4() && localIPv4 == "" {
				localIPv4 = p.Addr().String()
			}
		}
	}
	if localIPv4 == "" {
		for _, a := range in.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil && ip.Is4() {
				localIPv4 = a
				break
			}
		}
	}
	md := map[string]any{
		"ami-id":            ec2ID("ami-", in.Image+"\x00"+in.UUID),
		"ami-launch-index":  in.LaunchIndex,
		"ami-manifest-path": "FIXME",
		"instance-id":       ec2ID("i-", in.UUID),
		"hostname":          r.hostname,
		"local-ipv4":        localIPv4,
		"reservation-id":    ec2ID("r-", in.UUID),
		"security-groups":   []string{"default"},
	}
	if len(in.PublicKeys) > 0 {
		// The config drive drops Nova's "_name" pseudo-key; the HTTP
		// listing ("0=name") takes names from meta_data.json's keys.
		keys := map[string]any{}
		for i, k := range in.PublicKeys {
			keys[fmt.Sprint(i)] = map[string]any{"openssh-key": k.Data}
		}
		md["public-keys"] = keys
	}
	if v >= "2007-01-19" {
		md["local-hostname"] = r.hostname
		md["public-hostname"] = r.hostname
		md["public-ipv4"] = ""
	}
	if v >= "2007-08-29" {
		md["instance-type"] = in.Flavor
	}
	if v >= "2007-12-15" {
		md["block-device-mapping"] = blockDeviceMapping(in)
	}
	if v >= "2008-02-01" {
		az := in.AvailabilityZone
		if az == "" {
			az = "nova"
		}
		md["placement"] = map[string]any{"availability-zone": az}
	}
	if v >= "2008-09-01" {
		md["instance-action"] = "none"
	}
	return md
}

// blockDeviceMapping follows Nova's EC2 mappings: the root disk as "ami"
// and "root", a flavor's ephemeral disk as ephemeral0 (formatted ext4,
// labelled ephemeral0, as Nova's default_ephemeral_format makes it) and
// its swap disk as "swap", every other disk as ebsN (a volume).
// cloud-init's cc_mounts mounts ephemeral0 at /mnt and enables swap, and
// writes both into /etc/fstab; so only a flavor's disks, which hostctl
// formats, are named so: a tagged data disk of the spec is never mounted
// under /mnt behind the application's back. Without disk kinds (a spec
// that names no registered flavor) the first disk is the root disk.
func blockDeviceMapping(in *model.Instance) map[string]any {
	m := map[string]any{}
	kinded := slices.ContainsFunc(in.Disks, func(d model.Disk) bool { return d.Kind != "" })
	ebs, eph := 0, 0
	for i, d := range in.Disks {
		switch {
		case d.Kind == model.DiskKindRoot || !kinded && i == 0:
			m["ami"] = d.Name
			m["root"] = "/dev/" + d.Name
		case d.Kind == model.DiskKindEphemeral:
			m[fmt.Sprintf("ephemeral%d", eph)] = "/dev/" + d.Name
			eph++
		case d.Kind == model.DiskKindSwap:
			m["swap"] = "/dev/" + d.Name
		default:
			m[fmt.Sprintf("ebs%d", ebs)] = "/dev/" + d.Name
			ebs++
		}
	}
	return m
}
