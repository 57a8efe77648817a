package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unique"

	"github.com/vmeta/vmeta/internal/metadata"
	"github.com/vmeta/vmeta/internal/store"
)

// Content types Nova sends: JSON documents are application/json, every
// other file (network_data.json included) and every listing text/plain.
const (
	contentJSON = "application/json"
	contentText = "text/plain; charset=UTF-8"
)

// Header values shared by every response (never modified): setting a
// header from these costs no allocation.
var (
	ctJSON = []string{contentJSON}
	ctText = []string{contentText}
)

// pathClass groups paths for metrics.
type pathClass uint8

const (
	classOpenStackMetaData pathClass = iota // openstack/<ver>/meta_data.json
	classOpenStackOther                     // other OpenStack files
	classEC2                                // EC2 files
	classListing                            // version and directory listings
	classPassword                           // openstack/<ver>/password
	classToken                              // PUT /latest/api/token
	classOther                              // /healthz, unknown paths
	numClasses
)

var classNames = [numClasses]string{
	"openstack_meta_data", "openstack_other", "ec2", "listing", "password", "token", "other",
}

func (c pathClass) String() string { return classNames[c] }

// entry is one servable path of an instance, as a lookup finds it.
type entry struct {
	body  []byte
	json  bool // application/json; else text/plain
	class pathClass
	// password marks openstack/<ver>/password: its body comes from the
	// store, and it takes POST (Nova's password endpoint).
	password bool
}

// header returns the entry's Content-Type header value.
func (e *entry) header() []string {
	if e.json {
		return ctJSON
	}
	return ctText
}

// The versions a view serves, by index: the OpenStack versions and
// "latest", then the EC2 versions and "latest".
var (
	osVersions  = append(slices.Clone(metadata.OpenStackVersions), "latest")
	ec2Versions = append(slices.Clone(metadata.EC2Versions), "latest")
	numVersions = len(osVersions) + len(ec2Versions)
	osIndex     = versionIndex(osVersions, 0)
	ec2Index    = versionIndex(ec2Versions, len(osVersions))
)

func init() {
	if numVersions > 64 {
		panic("server: more than 64 metadata versions: vdir.vers holds one bit per version")
	}
}

func versionIndex(vers []string, first int) map[string]uint8 {
	m := make(map[string]uint8, len(vers))
	for i, v := range vers {
		m[v] = uint8(first + i)
	}
	return m
}

func isOSVersion(i int) bool { return i < len(osVersions) }

// versionName returns the tree ("openstack" or "ec2") and name of a
// version index.
func versionName(i int) (top, ver string) {
	if isOSVersion(i) {
		return "openstack", osVersions[i]
	}
	return "ec2", ec2Versions[i-len(osVersions)]
}

// view is every path an instance's guest may ask for. Views are what the
// server keeps in memory per instance, so they keep little (see
// BenchmarkViewMemory):
//
//   - the instance's tree in its stored form (metadata.Tree.Encode: each
//     distinct file once, deflated), until every directory is built;
//   - the directory (vdir) of each version asked for so far, built on
//     the first request for the version, and from then on found with one
//     atomic load. Most guests read one OpenStack and one EC2 version.
//     Versions whose files are all equal ("latest" and the newest dated
//     version) share a directory;
//   - the bodies of those directories, each distinct body once, in one
//     array. The paths, content types, classes, and listings that follow
//     from the paths, are a dirShape, which views alike share through
//     the cache's shapeTable.
//
// Below a version, paths are the rest of the normalized path
// (NormalizePath): "meta_data.json" for /openstack/latest/meta_data.json,
// "meta-data/hostname" for /2009-04-04/meta-data/hostname (and
// /ec2/2009-04-04/...), "" for the version's own listing. A request is
// looked up with substrings of its path, without building a key.
type view struct {
	// What every request reads comes first, in one cache line: in a boot
	// storm a guest's view has left the CPU's caches by its next request,
	// and each line is a miss (issue 23 item 3).
	uuid   string
	policy TokenPolicy
	// bucket is the instance's rate-limit bucket once a request (or the
	// warmer) looked it up (rateLimiter.viewBucket).
	bucket atomic.Pointer[bucket]
	// hot is the directory served last from the OpenStack tree (0) and
	// from the EC2 tree (1) (vdir.vers says for which versions): a guest
	// reads one version of each, and finding its directory here saves
	// reading dirs (another line).
	hot [2]atomic.Pointer[vdir]
	// dirs holds each version's directory once built, by version index
	// (see osVersions).
	dirs []atomic.Pointer[vdir]

	projectID string
	version   int64
	// reps gives, per version index, the version index whose directory
	// it shares (see checkTree).
	reps []uint8
	// keys are the names of the public keys openstack/latest's
	// meta_data.json lists (checkTree), for the EC2 public-keys listings.
	keys []string

	// mu serializes building directories, and guards tree, bodies,
	// shapes and interned.
	mu sync.Mutex
	// tree is the stored form of the instance's tree; nil once every
	// directory is built.
	tree []byte
	// decoded is the tree buildView decoded, for the first directory
	// built (the first request of a guest needs one at once); nil after.
	// freeDecoded gives its buffer back once that directory is built (what
	// a directory keeps is copied: see add).
	decoded     *metadata.Tree
	freeDecoded func()
	// bodies are the bodies of the directories built so far.
	bodies []byte
	// shapes is the table directories take their shapes from while the
	// cache holds the view (nil before and after: directories then get
	// shapes of their own); interned are the shapes taken from it, one
	// reference each, given back when the cache drops the view.
	shapes   *shapeTable
	interned []*dirShape

	// addrs are the source addresses the cache maps to this view (kept so
	// that invalidating the view drops them); guarded by cache.mu.
	addrs []netip.Addr

	// _ makes a view 320 bytes, a size class whose objects start on a
	// cache line, so that the fields read by every request (uuid to hot)
	// are one line, not two (TestViewLayout).
	_ [40]byte
}

// vdir is one version's directory of one instance: where each slot of its
// shape finds its body. Immutable.
type vdir struct {
	shape *dirShape
	// vers has bit i set for each version index i whose directory this
	// is (versions alike share one).
	vers uint64
	// bodies are the view's bodies when the directory was made; spans
	// gives, per slot, the offset and length of its body there (nothing
	// for slots whose body the shape holds).
	bodies []byte
	spans  []uint32
}

// newVdir returns a directory of shape with n spans, which share the
// directory's allocation when n is at most 64: a request reads the
// directory and then its body's span, and in a boot storm each is a
// cache miss unless they are neighbours (perf annotate of view.find:
// the load of the span was a quarter of its samples; issue 23 item 3).
func newVdir(shape *dirShape, n int) *vdir {
	switch {
	case n <= 16:
		x := &struct {
			vdir
			a [16]uint32
		}{}
		x.shape, x.spans = shape, x.a[:n:n]
		return &x.vdir
	case n <= 32:
		x := &struct {
			vdir
			a [32]uint32
		}{}
		x.shape, x.spans = shape, x.a[:n:n]
		return &x.vdir
	case n <= 64:
		x := &struct {
			vdir
			a [64]uint32
		}{}
		x.shape, x.spans = shape, x.a[:n:n]
		return &x.vdir
	}
	return &vdir{shape: shape, spans: make([]uint32, n)}
}

// body returns the body of a slot.
func (d *vdir) body(i int) []byte {
	if s := &d.shape.slots[i]; s.shared {
		return s.body
	}
	off, n := d.spans[2*i], d.spans[2*i+1]
	return d.bodies[off : off+n : off+n]
}

// buildView checks a published document and keeps what its view's
// directories are built from.
func buildView(doc store.Document, policy TokenPolicy) (*view, error) {
	t, release, err := metadata.DecodeTreeScratch(doc.Tree)
	if err != nil {
		return nil, err
	}
	reps, keys, err := checkTree(t)
	if err != nil {
		release()
		return nil, err
	}
	return &view{
		uuid: doc.InstanceUUID, projectID: unique.Make(doc.ProjectID).Value(), version: doc.Version, policy: policy,
		reps: reps, keys: keys, dirs: make([]atomic.Pointer[vdir], numVersions), tree: doc.Tree, decoded: t, freeDecoded: release,
	}, nil
}

// adopt makes the view take its directories' shapes from table (the
// cache holds it from now on).
func (v *view) adopt(table *shapeTable) {
	v.mu.Lock()
	v.shapes = table
	v.mu.Unlock()
}

// release gives back the view's shapes (the cache no longer holds it).
// Directories built from now on get shapes of their own.
func (v *view) release() {
	v.mu.Lock()
	for _, s := range v.interned {
		v.shapes.release(s)
	}
	v.shapes, v.interned = nil, nil
	v.mu.Unlock()
}

// find returns the entry of a path split by splitPath. It builds the
// path's version directory if needed; an error means the document cannot
// be served (see corruptError).
func (v *view) find(isOS bool, rest string, memo *connMemo) (entry, bool, error) {
	ver, sub, _ := strings.Cut(rest, "/")
	var (
		i  uint8
		ok bool
	)
	if isOS {
		i, ok = osIndex[ver]
	} else {
		i, ok = ec2Index[ver]
	}
	if !ok {
		return entry{}, false, nil
	}
	var d *vdir
	if memo != nil && memo.dir != nil && memo.dir.vers&(1<<i) != 0 {
		d = memo.dir
	} else {
		var err error
		if d, err = v.dir(isOS, i); err != nil {
			return entry{}, false, err
		}
		if memo != nil {
			memo.dir = d
		}
	}
	n, ok := d.shape.index[sub]
	if !ok {
		return entry{}, false, nil
	}
	s := &d.shape.slots[n]
	return entry{body: d.body(int(n)), json: s.json, class: s.class, password: s.password}, true, nil
}

// dir returns the directory of version index i (of the OpenStack tree
// if isOS), the tree's hot one when it serves i, building it if needed.
func (v *view) dir(isOS bool, i uint8) (*vdir, error) {
	hot := &v.hot[1]
	if isOS {
		hot = &v.hot[0]
	}
	if d := hot.Load(); d != nil && d.vers&(1<<i) != 0 {
		return d, nil
	}
	d := v.dirs[i].Load()
	if d == nil {
		var err error
		if d, err = v.build(int(i)); err != nil {
			return nil, err
		}
	}
	hot.Store(d) // only when the guest's version changed: the line stays shared
	return d, nil
}

// lookup is find for callers that know the document to be sound.
func (v *view) lookup(isOS bool, rest string) (entry, bool) {
	e, ok, err := v.find(isOS, rest, nil)
	return e, ok && err == nil
}

// build builds the directory of version index i (and of the versions
// sharing it) and publishes it.
func (v *view) build(i int) (*vdir, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if d := v.dirs[i].Load(); d != nil {
		return d, nil
	}
	t, release, err := v.treeLocked()
	if err != nil {
		return nil, err
	}
	d, err := v.buildLocked(i, t)
	release()
	return d, err
}

// prebuild builds the directories of version indexes idx not built yet,
// decoding the tree once (see Server.warm).
func (v *view) prebuild(idx ...int) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	var t *metadata.Tree
	release := func() {}
	defer func() { release() }()
	for _, i := range idx {
		if v.dirs[i].Load() != nil {
			continue
		}
		if t == nil {
			var err error
			if t, release, err = v.treeLocked(); err != nil {
				return err
			}
		}
		if _, err := v.buildLocked(i, t); err != nil {
			return err
		}
	}
	if v.decoded != nil { // every directory asked for was built
		v.freeDecoded()
		v.decoded, v.freeDecoded = nil, nil
	}
	return nil
}

// treeLocked is the decoded tree, buildView's (handed over once), or the
// stored form decoded again, with the function that gives its buffer
// back: the caller calls it once done with the tree.
func (v *view) treeLocked() (*metadata.Tree, func(), error) {
	if t := v.decoded; t != nil {
		free := v.freeDecoded
		v.decoded, v.freeDecoded = nil, nil
		return t, free, nil
	}
	return metadata.DecodeTreeScratch(v.tree)
}

// buildLocked builds the directory of version index i from t, with v.mu
// held.
func (v *view) buildLocked(i int, t *metadata.Tree) (*vdir, error) {
	rep := int(v.reps[i])
	var b dirBuilder
	if isOSVersion(rep) {
		buildOS(&b, rep, t)
	} else if err := buildEC2(&b, rep, t, v.keys); err != nil {
		return nil, err
	}
	d := v.add(&b)
	for j := range numVersions {
		if int(v.reps[j]) == rep {
			d.vers |= 1 << j
		}
	}
	complete := true
	for j := range numVersions {
		if int(v.reps[j]) == rep {
			v.dirs[j].Store(d)
		}
		complete = complete && v.dirs[j].Load() != nil
	}
	if complete {
		v.tree = nil // no longer needed
	}
	return d, nil
}

// hasPassword reports whether an OpenStack version has the password file
// (from 2013-04-04 on).
func hasPassword(ver string) bool { return ver == "latest" || ver >= metadata.Grizzly }

// openStackFiles are the files of an OpenStack version, in Nova's listing
// order.
var openStackFiles = []string{"meta_data.json", "user_data", "password", "vendor_data.json", "network_data.json", "vendor_data2.json"}

// buildOS collects the paths of OpenStack version index i (Nova's lookup
// and get_openstack_item).
func buildOS(b *dirBuilder, i int, t *metadata.Tree) {
	ver := osVersions[i]
	var listing []string
	for _, name := range openStackFiles {
		if name == "password" {
			// The password file exists from 2013-04-04 on; GET returns
			// the stored password, empty until the guest posts one.
			if hasPassword(ver) {
				listing = append(listing, name)
				b.add(name, slot{class: classPassword, password: true}, nil)
			}
			continue
		}
		body, ok := fileOf(t, i, slices.Index(osFiles, name))
		if !ok {
			continue
		}
		listing = append(listing, name)
		s := slot{class: classOpenStackOther}
		switch name {
		case "meta_data.json":
			s.json, s.class = true, classOpenStackMetaData
		case "vendor_data.json", "vendor_data2.json":
			s.json = true
		}
		b.add(name, s, body)
	}
	// Nova's _network_data has no version check: network_data.json is
	// served for every version, though listed only from 2015-10-15.
	if _, ok := fileOf(t, i, colNetworkData); !ok {
		if nd, ok := fileOf(t, len(osVersions)-1, colNetworkData); ok {
			b.add("network_data.json", slot{class: classOpenStackOther}, nd)
		}
	}
	b.add("", slot{class: classListing}, []byte(strings.Join(listing, "\n")))
	// Content blobs (injected files) live only on the config drive
	// (Tree.DriveOnly), so /openstack/content/... is always 404 here.
}

// buildEC2 collects the paths of EC2 version index i (Nova's get_ec2_item
// and ec2_md_print); names are the public keys' (keyNames).
func buildEC2(b *dirBuilder, i int, t *metadata.Tree, names []string) error {
	ver := ec2Versions[i-len(osVersions)]
	raw, _ := fileOf(t, i, colMetaData)
	var tree map[string]any
	if err := json.Unmarshal(raw, &tree); err != nil {
		return fmt.Errorf("decode ec2/%s/meta-data.json: %w", ver, err)
	}
	if pk, ok := tree["public-keys"].(map[string]any); ok {
		for idx, name := range names {
			if sub, ok := pk[strconv.Itoa(idx)].(map[string]any); ok {
				sub["_name"] = strconv.Itoa(idx) + "=" + name
			}
		}
	}
	// The bodies rendered (values and listings) are about as long as
	// the JSON they come from.
	b.buf = make([]byte, 0, len(raw))
	top := map[string]any{"meta-data": tree}
	if ud, ok := fileOf(t, i, colUserData); ok {
		top["user-data"] = string(ud)
	}
	b.addEC2("", top)
	return nil
}

// dirBuilder collects the paths of a version's directory.
type dirBuilder struct {
	items []item
	// buf holds the bodies the builder renders (EC2 values and
	// listings). Appending never changes what earlier bodies slice,
	// even when it moves to a larger array.
	buf []byte
}

type item struct {
	key  string
	slot slot
	body []byte
}

func (b *dirBuilder) add(key string, s slot, body []byte) {
	b.items = append(b.items, item{key, s, body})
}

// addEC2 adds p (a path below the version, "" for the version itself) and
// everything below it, rendered as ec2_md_print does.
func (b *dirBuilder) addEC2(p string, data any) {
	text := func(s string) { b.add(p, slot{class: classEC2}, b.text(s)) }
	switch v := data.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			if k != "_name" {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			sub := k
			if p != "" {
				sub = p + "/" + k
			}
			b.addEC2(sub, v[k])
		}
		// The listing, once what is below it is added (its body is
		// one run of the builder's text).
		start := len(b.buf)
		for i, k := range keys {
			if i > 0 {
				b.buf = append(b.buf, '\n')
			}
			if sub, ok := v[k].(map[string]any); ok {
				if name, ok := sub["_name"].(string); ok {
					b.buf = append(b.buf, name...)
				} else {
					b.buf = append(b.buf, k...)
					b.buf = append(b.buf, '/')
				}
			} else {
				b.buf = append(b.buf, k...)
			}
		}
		b.add(p, slot{class: classListing}, b.buf[start:len(b.buf):len(b.buf)])
	case []any:
		items := make([]string, len(v))
		for i, it := range v {
			items[i] = fmt.Sprint(it)
		}
		text(strings.Join(items, "\n"))
	case string:
		text(v)
	case nil:
		text("None") // Python's str(None), as Nova prints it
	case float64:
		start := len(b.buf)
		b.buf = strconv.AppendFloat(b.buf, v, 'f', -1, 64)
		b.add(p, slot{class: classEC2}, b.buf[start:len(b.buf):len(b.buf)])
	case bool:
		if v {
			text("True")
		} else {
			text("False")
		}
	default:
		text(fmt.Sprint(v))
	}
}

// text returns s as bytes of the builder's own (appended to buf: one
// allocation for many bodies, each sliced to its length).
func (b *dirBuilder) text(s string) []byte {
	start := len(b.buf)
	b.buf = append(b.buf, s...)
	return b.buf[start:len(b.buf):len(b.buf)]
}

// sorted returns the paths added, sorted, each once (of a path added
// twice, the last).
func (b *dirBuilder) sorted() []item {
	sort.SliceStable(b.items, func(i, j int) bool { return b.items[i].key < b.items[j].key })
	items := b.items[:0]
	for i, it := range b.items {
		if i+1 < len(b.items) && b.items[i+1].key == it.key {
			continue
		}
		items = append(items, it)
	}
	return items
}

// add makes a directory of the paths b collected. Its bodies join the
// view's, each distinct body once per view: new ones are appended to the
// view's array when they fit in its capacity; else the array is copied to
// a larger one, and the directories built earlier are replaced by copies
// pointing there (their spans stay valid: bodies keep their offsets).
func (v *view) add(b *dirBuilder) *vdir {
	items := b.sorted()
	for i := range items {
		// A listing is shared when it follows from the paths; one
		// naming public keys ("0=name") is the instance's own.
		it := &items[i]
		it.slot.shared = it.slot.class == classListing && bytes.IndexByte(it.body, '=') < 0
	}
	shape := v.shapes.intern(items)
	if v.shapes != nil {
		v.interned = append(v.interned, shape)
	}
	d := newVdir(shape, 2*len(items))

	var built []*vdir // the distinct directories built so far
	for j := range numVersions {
		if o := v.dirs[j].Load(); o != nil && !slices.Contains(built, o) {
			built = append(built, o)
		}
	}
	// Place each body where an equal one is, or after the view's.
	var added []int // slots whose body is new
	end := len(v.bodies)
	for k, it := range items {
		if it.slot.shared {
			continue
		}
		n := uint32(len(it.body))
		var (
			off uint32
			ok  bool
		)
		for _, o := range built {
			if off, ok = spanOf(v.bodies, o.spans, it.body); ok {
				break
			}
		}
		for _, a := range added {
			if ok {
				break
			}
			if d.spans[2*a+1] == n && bytes.Equal(items[a].body, it.body) {
				off, ok = d.spans[2*a], true
			}
		}
		if !ok {
			off = uint32(end)
			end += len(it.body)
			added = append(added, k)
		}
		d.spans[2*k], d.spans[2*k+1] = off, n
	}
	if end <= cap(v.bodies) {
		// The new bodies fit after the old ones: directories built
		// earlier never read there.
		d.bodies = v.bodies[:end]
		for _, k := range added {
			copy(d.bodies[d.spans[2*k]:], items[k].body)
		}
		v.bodies = d.bodies
		return d
	}
	bodies := slices.Grow([]byte(nil), end)[:end] // capacity rounded up to the allocation's
	copy(bodies, v.bodies)
	for _, k := range added {
		copy(bodies[d.spans[2*k]:], items[k].body)
	}
	d.bodies, v.bodies = bodies, bodies
	for _, o := range built {
		moved := &vdir{shape: o.shape, vers: o.vers, bodies: bodies, spans: o.spans}
		for j := range numVersions {
			if v.dirs[j].Load() == o {
				v.dirs[j].Store(moved)
			}
		}
		// The old array is let go (a request racing this may leave o
		// in hot until its guest's version changes: the same bodies).
		for k := range v.hot {
			v.hot[k].CompareAndSwap(o, moved)
		}
	}
	return d
}

// spanOf finds, among spans (offset, length pairs) into bodies, a body
// equal to p.
func spanOf(bodies []byte, spans []uint32, p []byte) (uint32, bool) {
	n := uint32(len(p))
	for k := 0; k+1 < len(spans); k += 2 {
		if off := spans[k]; spans[k+1] == n && bytes.Equal(bodies[off:off+n], p) {
			return off, true
		}
	}
	return 0, false
}

// paths returns every normalized path (NormalizePath form) the view
// serves, sorted. It builds every directory.
func (v *view) paths() []string {
	var out []string
	for i := range numVersions {
		d := v.dirs[i].Load()
		if d == nil {
			var err error
			if d, err = v.build(i); err != nil {
				continue
			}
		}
		top, ver := versionName(i)
		for k := range d.shape.index {
			p := top + "/" + ver
			if k != "" {
				p += "/" + k
			}
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}
