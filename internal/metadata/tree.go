package metadata

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
)

// Tree is the whole guest-visible file tree of one instance, keyed by
// slash-separated paths relative to the root of a config drive, e.g.
// "openstack/latest/meta_data.json", "ec2/2009-04-04/meta-data.json". Files
// holds every OpenStack and every EC2 version as the metadata service
// serves them.
//
// DriveOnly holds what only a config drive carries: injected files (the
// content blobs) and the meta_data.json variants that list them. As in
// Nova, injected files never reach the HTTP service. ConfigDriveFiles
// merges the two.
type Tree struct {
	Files     map[string][]byte `json:"files"`
	DriveOnly map[string][]byte `json:"drive_only,omitempty"`
}

// File is one file of a tree.
type File struct {
	Path string
	Data []byte
}

// Get returns a file's content.
func (t *Tree) Get(path string) ([]byte, bool) {
	b, ok := t.Files[path]
	return b, ok
}

// Paths returns every path of the tree, sorted.
func (t *Tree) Paths() []string {
	ps := make([]string, 0, len(t.Files))
	for p := range t.Files {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

// ConfigDriveFiles returns, sorted by path, the files Nova writes to a config
// drive: every OpenStack version and latest, the content blobs, and the EC2
// tree only for 2009-04-04 and latest (Nova's default
// config_drive_skip_versions drops the older ones). Passwords are never part
// of a tree, so none reach a drive.
func (t *Tree) ConfigDriveFiles() []File {
	var out []File
	for _, p := range t.Paths() {
		if strings.HasPrefix(p, "ec2/") {
			v, _, _ := strings.Cut(strings.TrimPrefix(p, "ec2/"), "/")
			if v != EC2Latest && v != "latest" {
				continue
			}
		}
		data := t.Files[p]
		if d, ok := t.DriveOnly[p]; ok {
			data = d
		}
		out = append(out, File{Path: p, Data: data})
	}
	for p, d := range t.DriveOnly {
		if _, ok := t.Files[p]; !ok {
			out = append(out, File{Path: p, Data: d})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// The stored form of a tree ("vmeta-tree/3"): the magic below, then a
// DEFLATE stream, against the preset dictionary treeDict, of
//
//	uvarint(number of distinct contents), then each: uvarint(len), bytes
//	uvarint(number of Files), then each: uvarint(len), path, uvarint(content index)
//	uvarint(number of DriveOnly files), the same way
//
// Most files repeat across versions (user_data, network_data.json, vendor
// data, EC2 meta-data), so each distinct content is stored once; what
// trees have in common (paths, keys, structure) is in the dictionary and
// costs next to nothing. A tree of the example instance takes about 1.5 KB
// this way instead of 55 KB of JSON. The store keeps this form, and the
// metadata server keeps it in memory until it has built what it serves.
// DecodeTree also reads the earlier forms: "VMT2" (the same stream,
// deflated without a dictionary) and plain JSON of Tree.
const (
	treeMagic   = "VMT3"
	treeMagicV2 = "VMT2"
)

// Limits that keep a corrupt document from making DecodeTree, or whoever
// uses the tree it returns, work without bound. maxTreeBytes caps both the
// decompressed form and the tree's content as its readers see it: every
// path counts its content's length, so a small document whose 65,536 paths
// all name one 64 MiB blob (4 TiB once served or written to a drive) is
// refused.
const (
	maxTreeEntries = 1 << 16
	maxTreeBytes   = 64 << 20
)

// Encode serializes a tree for the store.
func (t *Tree) Encode() ([]byte, error) {
	raw := t.stream()
	var buf bytes.Buffer
	buf.WriteString(treeMagic)
	zw, err := flate.NewWriterDict(&buf, flate.DefaultCompression, treeDict)
	if err != nil {
		return nil, fmt.Errorf("encode tree: %w", err)
	}
	if _, err := zw.Write(raw); err != nil {
		return nil, fmt.Errorf("encode tree: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("encode tree: %w", err)
	}
	return buf.Bytes(), nil
}

// stream is the stored form of t before it is deflated.
func (t *Tree) stream() []byte {
	var raw []byte
	index := map[string]int{}
	var blobs [][]byte
	intern := func(b []byte) int {
		if i, ok := index[string(b)]; ok {
			return i
		}
		index[string(b)] = len(blobs)
		blobs = append(blobs, b)
		return len(blobs) - 1
	}
	type ref struct {
		path string
		blob int
	}
	refs := func(m map[string][]byte) []ref {
		paths := make([]string, 0, len(m))
		for p := range m {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		out := make([]ref, len(paths))
		for i, p := range paths {
			out[i] = ref{p, intern(m[p])}
		}
		return out
	}
	files, drive := refs(t.Files), refs(t.DriveOnly)
	raw = binary.AppendUvarint(raw, uint64(len(blobs)))
	for _, b := range blobs {
		raw = binary.AppendUvarint(raw, uint64(len(b)))
		raw = append(raw, b...)
	}
	for _, list := range [][]ref{files, drive} {
		raw = binary.AppendUvarint(raw, uint64(len(list)))
		for _, r := range list {
			raw = binary.AppendUvarint(raw, uint64(len(r.path)))
			raw = append(raw, r.path...)
			raw = binary.AppendUvarint(raw, uint64(r.blob))
		}
	}
	return raw
}

// inflaters are flate readers to reuse (each holds tens of KiB of
// tables and window): servers decode a tree on every first request for an
// instance.
var inflaters sync.Pool

// getInflater returns a flate reader of b with dictionary dict, from
// inflaters when one is there.
func getInflater(b, dict []byte) io.ReadCloser {
	r := bytes.NewReader(b)
	if fr, ok := inflaters.Get().(io.ReadCloser); ok {
		if err := fr.(flate.Resetter).Reset(r, dict); err == nil {
			return fr
		}
	}
	if dict != nil {
		return flate.NewReaderDict(r, dict)
	}
	return flate.NewReader(r)
}

// DecodeTree parses a tree serialized by Encode (or an earlier form).
func DecodeTree(b []byte) (*Tree, error) {
	t, _, err := decodeTree(b, nil)
	return t, err
}

// scratchTrees are the buffers of trees their callers released
// (DecodeTreeScratch), for the next decode.
var scratchTrees sync.Pool

// maxScratch is the largest buffer kept for another decode.
const maxScratch = 256 << 10

// DecodeTreeScratch is DecodeTree for a caller that is done with the tree
// soon, and with every file of it (it copies what it keeps): once it has
// dropped them it calls release, and the buffer the files were inflated
// into serves the next decode. The metadata server decodes a tree on the
// first request for an instance, and copies what it serves.
func DecodeTreeScratch(b []byte) (t *Tree, release func(), err error) {
	var buf []byte
	if p, ok := scratchTrees.Get().(*[]byte); ok {
		buf = *p
	}
	t, raw, err := decodeTree(b, buf)
	if err != nil || cap(raw) > maxScratch || cap(raw) == 0 {
		return t, func() {}, err
	}
	return t, func() {
		raw = raw[:0]
		scratchTrees.Put(&raw)
	}, nil
}

// decodeTree decodes b, inflating into buf when it has room (nil: a new
// buffer), and returns the buffer the files point into (nil for a tree
// in the JSON form).
func decodeTree(b, buf []byte) (*Tree, []byte, error) {
	var zr io.Reader
	switch {
	case bytes.HasPrefix(b, []byte(treeMagic)):
		fr := getInflater(b[len(treeMagic):], treeDict)
		defer inflaters.Put(fr)
		zr = fr
	case bytes.HasPrefix(b, []byte(treeMagicV2)):
		fr := getInflater(b[len(treeMagicV2):], nil)
		defer inflaters.Put(fr)
		zr = fr
	default:
		var t Tree
		if err := json.Unmarshal(b, &t); err != nil {
			return nil, nil, fmt.Errorf("decode tree: %w", err)
		}
		if len(t.Files) == 0 {
			return nil, nil, fmt.Errorf("decode tree: no files")
		}
		if n := len(t.Files) + len(t.DriveOnly); n > maxTreeEntries {
			return nil, nil, fmt.Errorf("decode tree: %d files, more than %d (maxTreeEntries)", n, maxTreeEntries)
		}
		return &t, nil, nil
	}
	// A stored tree inflates about thirtyfold (its files are alike, and
	// the dictionary holds what every tree says): one buffer, mostly
	// without growing it (the files of the tree point into it). The
	// guess is capped: a tree of incompressible user data inflates
	// little, and grows the buffer instead.
	if guess := min(32*len(b), 64<<10) + bytes.MinRead; cap(buf) < guess {
		buf = make([]byte, 0, guess)
	}
	w := bytes.NewBuffer(buf[:0])
	_, err := w.ReadFrom(io.LimitReader(zr, maxTreeBytes+1))
	raw := w.Bytes()
	if err != nil {
		return nil, nil, fmt.Errorf("decode tree: %w", err)
	}
	if len(raw) > maxTreeBytes {
		return nil, nil, fmt.Errorf("decode tree: larger than %d bytes (maxTreeBytes)", maxTreeBytes)
	}
	d := treeDecoder{b: raw}
	n := d.count()
	blobs := make([][]byte, 0, min(n, maxTreeEntries))
	for i := 0; i < n && d.err == nil; i++ {
		blobs = append(blobs, d.bytes())
	}
	maps := [2]map[string][]byte{}
	var total int64 // content as readers see it: each path counts its blob
	for k := range maps {
		n := d.count()
		maps[k] = make(map[string][]byte, min(n, maxTreeEntries))
		for i := 0; i < n && d.err == nil; i++ {
			p := pathString(d.bytes())
			bi := d.count()
			if d.err == nil && bi >= len(blobs) {
				d.err = fmt.Errorf("content index %d out of range", bi)
			}
			if d.err == nil {
				total += int64(len(blobs[bi]))
				if total > maxTreeBytes {
					d.err = fmt.Errorf("files total more than %d bytes (maxTreeBytes; %d paths so far)", maxTreeBytes, len(maps[k])+1)
				}
			}
			if d.err == nil {
				maps[k][p] = blobs[bi]
			}
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, nil, fmt.Errorf("decode tree: %w", d.err)
	}
	if len(maps[0]) == 0 {
		return nil, nil, fmt.Errorf("decode tree: no files")
	}
	t := &Tree{Files: maps[0]}
	if len(maps[1]) > 0 {
		t.DriveOnly = maps[1]
	}
	return t, raw, nil
}

// knownPaths are the paths every tree has (each file of each version, as
// Render writes them), so that decoding a tree finds their strings here
// instead of allocating one per path: the metadata server decodes a tree
// on the first request for an instance.
var knownPaths = func() map[string]string {
	m := map[string]string{}
	for _, v := range append(append([]string(nil), OpenStackVersions...), "latest") {
		for _, f := range []string{"meta_data.json", "user_data", "vendor_data.json", "network_data.json", "vendor_data2.json"} {
			p := "openstack/" + v + "/" + f
			m[p] = p
		}
	}
	for _, v := range append(append([]string(nil), EC2Versions...), "latest") {
		for _, f := range []string{"meta-data.json", "user-data"} {
			p := "ec2/" + v + "/" + f
			m[p] = p
		}
	}
	return m
}()

// pathString is b as a string: a known path's shared string, or a copy.
func pathString(b []byte) string {
	if p, ok := knownPaths[string(b)]; ok {
		return p
	}
	return string(b)
}

// treeDecoder reads the varint-framed fields of the stored form; the
// first error sticks.
type treeDecoder struct {
	b   []byte
	err error
}

func (d *treeDecoder) count() int {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > maxTreeEntries {
		d.err = fmt.Errorf("bad count at offset %d", n)
		return 0
	}
	d.b = d.b[n:]
	return int(v)
}

func (d *treeDecoder) bytes() []byte {
	if d.err != nil {
		return nil
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > uint64(len(d.b)-n) {
		d.err = fmt.Errorf("truncated field")
		return nil
	}
	out := d.b[n : n+int(v) : n+int(v)]
	d.b = d.b[n+int(v):]
	return out
}
