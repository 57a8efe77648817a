package server

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/model"
)

// source is what a view builds its directories from: the distinct files
// of the instance's tree, deflated. An instance's files have much in
// common (each version's meta_data.json repeats most of the next one's,
// user data is in every version), and, against a dictionary of a typical
// instance's files (deflateDict), what they share with other instances
// (the documents' keys and structure) costs next to nothing: the rich
// example's 65 files, 25 KiB (13 KiB once deduplicated), deflate to
// 1.1 KiB (1.7 KiB without the dictionary), most of it the 512 random
// bytes of random_seed.
type source struct {
	// data holds, in one allocation:
	//
	//   - tab: per version index, tabStride bytes: the distinct file
	//     of each of the version's files (osFiles or ec2Files; noFile
	//     when absent), then the index of the version whose directory
	//     it shares (itself, or the first version with the same files);
	//   - the number of distinct files, then their end offsets in the
	//     inflated files (little-endian uint32s);
	//   - the distinct files, concatenated and deflated.
	//
	// nil once every directory of the view is built.
	data []byte
}

const (
	tabStride = 6
	tabRep    = 5
	noFile    = 0xff
)

// The files a version is built from, by column of source.tab. osFiles is
// not the listing order (openStackFiles is).
var (
	osFiles  = []string{"meta_data.json", "user_data", "vendor_data.json", "network_data.json", "vendor_data2.json"}
	ec2Files = []string{"meta-data.json", "user-data"}
)

const (
	colMetaData    = 0 // meta_data.json, meta-data.json
	colUserData    = 1 // user_data, user-data
	colNetworkData = 3 // network_data.json
)

// newSource checks a tree (every version the server serves must be
// there, and what is decoded must decode) and packs its files.
func newSource(t *metadata.Tree) (source, error) {
	var (
		src source
		p   packer
	)
	tab := bytes.Repeat([]byte{noFile}, numVersions*tabStride)
	for i, ver := range osVersions {
		prefix := "openstack/" + ver + "/"
		if _, ok := t.Get(prefix + "meta_data.json"); !ok {
			return src, fmt.Errorf("tree has no %smeta_data.json", prefix)
		}
		for col, name := range osFiles {
			tab[i*tabStride+col] = p.add(t.Get(prefix + name))
		}
	}
	if _, err := keyNames(t.Files["openstack/latest/meta_data.json"]); err != nil {
		return src, err
	}
	checked := map[uint8]bool{}
	for j, ver := range ec2Versions {
		i := len(osVersions) + j
		prefix := "ec2/" + ver
		raw, ok := t.Get(prefix + "/meta-data.json")
		if !ok {
			return src, fmt.Errorf("tree has no %s/meta-data.json", prefix)
		}
		f := p.add(raw, true)
		tab[i*tabStride+colMetaData] = f
		if !checked[f] {
			// Decoded when the version is first asked for; what
			// would not decode is refused now, with the document.
			if err := checkObject(raw); err != nil {
				return src, fmt.Errorf("decode %s/meta-data.json: %w", prefix, err)
			}
			checked[f] = true
		}
		tab[i*tabStride+colUserData] = p.add(t.Get(prefix + "/user-data"))
	}
	// Versions with the same files (and, for OpenStack, the same password
	// file) share a directory.
	row := func(i int) []uint8 { return tab[i*tabStride : i*tabStride+tabRep] }
	for i := range numVersions {
		rep := i
		for j := range i {
			if isOSVersion(i) == isOSVersion(j) && bytes.Equal(row(i), row(j)) &&
				(!isOSVersion(i) || hasPassword(osVersions[i]) == hasPassword(osVersions[j])) {
				rep = j
				break
			}
		}
		tab[i*tabStride+tabRep] = uint8(rep)
	}
	data := append(tab, uint8(len(p.ends)))
	for _, end := range p.ends {
		data = binary.LittleEndian.AppendUint32(data, end)
	}
	src.data = deflate(data, p.data)
	return src, nil
}

// keyNames returns the names of the public keys meta_data.json lists.
// EC2's public-keys listings need them: Nova keeps them in a "_name"
// pseudo-key, vmeta takes them from meta_data.json's "keys".
func keyNames(metaData []byte) ([]string, error) {
	var md struct {
		Keys []struct {
			Name string `json:"name"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(metaData, &md); err != nil {
		return nil, fmt.Errorf("decode meta_data.json: %w", err)
	}
	names := make([]string, len(md.Keys))
	for i, k := range md.Keys {
		names[i] = k.Name
	}
	return names, nil
}

// rep returns the version index whose directory version index i shares.
func (src *source) rep(i int) int { return int(src.data[i*tabStride+tabRep]) }

// file returns file col of version index i from the inflated files (nil,
// false when the version has none).
func (src *source) file(files [][]byte, i, col int) ([]byte, bool) {
	f := src.data[i*tabStride+col]
	if f == noFile {
		return nil, false
	}
	return files[f], true
}

// files inflates the distinct files.
func (src *source) files() ([][]byte, error) {
	hdr := numVersions * tabStride
	n := int(src.data[hdr])
	ends := src.data[hdr+1 : hdr+1+4*n]
	size := 0
	if n > 0 {
		size = int(binary.LittleEndian.Uint32(ends[4*(n-1):]))
	}
	raw := make([]byte, size)
	if err := inflate(raw, src.data[hdr+1+4*n:]); err != nil {
		return nil, err
	}
	files := make([][]byte, n)
	start := uint32(0)
	for i := range files {
		end := binary.LittleEndian.Uint32(ends[4*i:])
		files[i] = raw[start:end:end]
		start = end
	}
	return files, nil
}

// checkObject reports an error when raw does not decode into a
// map[string]any, as json.Unmarshal would: when it is not valid JSON, or
// neither an object nor null. (A number out of float64's range is found
// only when the version is built.)
func checkObject(raw []byte) error {
	if b := bytes.TrimLeft(raw, " \t\r\n"); !json.Valid(raw) || (b[0] != '{' && b[0] != 'n') {
		var m map[string]any
		return json.Unmarshal(raw, &m)
	}
	return nil
}

// packer collects the distinct files of a tree.
type packer struct {
	data []byte
	ends []uint32
	seen map[string]uint8
}

// add returns the index of file f (noFile when !ok). A tree has at most
// 5 files per OpenStack and 2 per EC2 version: fewer than noFile.
func (p *packer) add(f []byte, ok bool) uint8 {
	if !ok {
		return noFile
	}
	if i, ok := p.seen[string(f)]; ok {
		return i
	}
	if p.seen == nil {
		p.seen = map[string]uint8{}
	}
	i := uint8(len(p.ends))
	p.seen[string(f)] = i
	p.data = append(p.data, f...)
	p.ends = append(p.ends, uint32(len(p.data)))
	return i
}

// deflateLevel trades the time of a cache miss (some tens of µs per
// level step) against memory.
const deflateLevel = flate.DefaultCompression

// deflateDict is the preset dictionary of every view's deflated files:
// the distinct files of a typical instance (dictInstance), in the order
// newSource packs them. Rendered once, never changed. (Were it not to
// render, files would be deflated without one: larger, still right.)
var deflateDict = sync.OnceValue(func() []byte {
	t, err := metadata.Render(dictInstance(), metadata.Options{Rand: bytes.NewReader(make([]byte, 512))})
	if err != nil {
		return nil
	}
	var p packer
	for _, ver := range osVersions {
		for _, name := range osFiles {
			p.add(t.Get("openstack/" + ver + "/" + name))
		}
	}
	for _, ver := range ec2Versions {
		for _, name := range ec2Files {
			p.add(t.Get("ec2/" + ver + "/" + name))
		}
	}
	const window = 32 << 10 // what flate can reach back
	if len(p.data) > window {
		return p.data[len(p.data)-window:]
	}
	return p.data
})

// dictInstance is a typical instance: a few metadata keys, a public key,
// cloud-config user data, a root and a data disk, and two NICs.
func dictInstance() *model.Instance {
	vlan := 100
	in := &model.Instance{
		Name:             "dict-instance-0000",
		UUID:             "00000000-0000-4000-8000-000000000000",
		ProjectID:        "project",
		AvailabilityZone: "nova",
		Flavor:           "m1.small",
		Image:            "debian-12",
		Addresses:        []string{"10.0.0.2"},
		Meta:             map[string]string{"role": "server"},
		PublicKeys:       []model.PublicKey{{Name: "default", Data: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI user@host"}},
		UserData:         "#cloud-config\npackage_update: true\npackages: []\nruncmd:\n  - true\n",
		Disks: []model.Disk{
			{Name: "vda", Bus: "virtio", Address: "0000:00:04.0", Serial: "root", Tag: "root"},
			{Name: "vdb", Bus: "virtio", Address: "0000:00:05.0", Serial: "data", Tag: "data", Size: "20G"},
		},
		NICs: []model.NIC{
			{MAC: "52:54:00:00:00:02", Address: "0000:00:02.0", Tag: "public",
				IPs: []model.IPConfig{{Address: "10.0.0.2/24", Gateway: "10.0.0.1", DNS: []string{"10.0.0.1"}}}},
			{MAC: "52:54:00:00:01:02", Address: "0000:00:03.0", Tag: "storage", VLAN: &vlan},
		},
	}
	in.Normalize()
	return in
}

// Deflaters and inflaters are reused: each holds tens of KiB of state.
var deflaters, inflaters sync.Pool

// deflate returns hdr followed by p deflated against deflateDict.
func deflate(hdr, p []byte) []byte {
	buf := bytes.NewBuffer(make([]byte, 0, len(hdr)+len(p)/8+64))
	buf.Write(hdr)
	w, _ := deflaters.Get().(*flate.Writer)
	if w == nil {
		w, _ = flate.NewWriterDict(buf, deflateLevel, deflateDict())
	} else {
		w.Reset(buf)
	}
	_, _ = w.Write(p) // a bytes.Buffer takes everything
	_ = w.Close()
	deflaters.Put(w)
	return bytes.Clone(buf.Bytes())
}

// inflate decompresses z (from deflate) into raw, which must have its
// exact size.
func inflate(raw, z []byte) error {
	zr := bytes.NewReader(z)
	r, _ := inflaters.Get().(io.ReadCloser)
	if r == nil {
		r = flate.NewReaderDict(zr, deflateDict())
	} else if err := r.(flate.Resetter).Reset(zr, deflateDict()); err != nil {
		return fmt.Errorf("inflate: %w", err)
	}
	_, err := io.ReadFull(r, raw)
	inflaters.Put(r)
	if err != nil {
		return fmt.Errorf("inflate: %w", err)
	}
	return nil
}
