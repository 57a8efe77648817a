package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"

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

// entry is one servable path of an instance (kept small: a view holds
// hundreds).
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

// view is every path an instance's guest may ask for, precomputed from its
// tree so that serving a request is two map lookups. The OpenStack and EC2
// trees are kept by version; below a version, keys are the rest of the
// normalized path (NormalizePath): os["latest"]["meta_data.json"] for
// /openstack/latest/meta_data.json, ec2["2009-04-04"]["meta-data/hostname"]
// for /2009-04-04/meta-data/hostname (and /ec2/2009-04-04/...), and ""
// for the version's own listing. A request is looked up with substrings
// of its path, without building a key.
//
// Views are what the server keeps in memory per instance, so they share
// what they can: identical bodies are stored once per view, a version
// whose files are all equal to another's ("latest" and the newest dated
// version) shares its directory, and keys are interned across views.
type view struct {
	uuid      string
	projectID string
	version   int64
	policy    TokenPolicy
	os        map[string]dir
	ec2       map[string]dir

	// addrs are the source addresses the cache maps to this view (kept so
	// that invalidating the view drops them); guarded by cache.mu.
	addrs []netip.Addr
}

// dir is one version of a tree: its paths below the version.
type dir map[string]entry

// lookup finds the entry of a path split by splitPath.
func (v *view) lookup(isOS bool, rest string) (entry, bool) {
	ver, sub, _ := strings.Cut(rest, "/")
	var d dir
	if isOS {
		d = v.os[ver]
	} else {
		d = v.ec2[ver]
	}
	e, ok := d[sub]
	return e, ok
}

// viewBuilder deduplicates bodies within a view.
type viewBuilder struct {
	bodies map[string][]byte
}

func (b *viewBuilder) body(p []byte) []byte {
	if shared, ok := b.bodies[string(p)]; ok {
		return shared
	}
	b.bodies[string(p)] = p
	return p
}

func (b *viewBuilder) text(s string) []byte {
	if shared, ok := b.bodies[s]; ok {
		return shared
	}
	p := []byte(s)
	b.bodies[s] = p
	return p
}

// internedKeys holds the dir keys of every view ("meta-data/hostname",
// "meta_data.json"...), which are the same for nearly every instance.
// Past maxInternedKeys new keys are no longer interned.
var internedKeys struct {
	sync.Mutex
	m map[string]string
}

const maxInternedKeys = 4096

func intern(k string) string {
	internedKeys.Lock()
	defer internedKeys.Unlock()
	if s, ok := internedKeys.m[k]; ok {
		return s
	}
	if internedKeys.m == nil {
		internedKeys.m = map[string]string{}
	}
	if len(internedKeys.m) < maxInternedKeys {
		internedKeys.m[k] = k
	}
	return k
}

// sameDir reports whether two dirs serve the same bodies under the same
// keys.
func sameDir(a, b dir) bool {
	if len(a) != len(b) {
		return false
	}
	for k, ea := range a {
		eb, ok := b[k]
		if !ok || ea.class != eb.class || ea.password != eb.password || ea.json != eb.json || !bytes.Equal(ea.body, eb.body) {
			return false
		}
	}
	return true
}

// share returns an earlier dir equal to d, or d.
func share(d dir, earlier map[string]dir) dir {
	for _, e := range earlier {
		if sameDir(d, e) {
			return e
		}
	}
	return d
}

// openStackFiles are the files of an OpenStack version, in Nova's listing
// order.
var openStackFiles = []string{"meta_data.json", "user_data", "password", "vendor_data.json", "network_data.json", "vendor_data2.json"}

// buildView renders the HTTP view of a published document (Nova's lookup,
// get_openstack_item, get_ec2_item and ec2_md_print).
func buildView(doc store.Document, policy TokenPolicy) (*view, error) {
	t, err := metadata.DecodeTree(doc.Tree)
	if err != nil {
		return nil, err
	}
	v := &view{
		uuid: doc.InstanceUUID, projectID: doc.ProjectID, version: doc.Version, policy: policy,
		os: make(map[string]dir, len(metadata.OpenStackVersions)+1), ec2: make(map[string]dir, len(metadata.EC2Versions)+1),
	}
	b := &viewBuilder{bodies: make(map[string][]byte, 128)}

	// OpenStack: listings and files per version.
	var networkData []byte
	if nd, ok := t.Get("openstack/latest/network_data.json"); ok {
		networkData = b.body(nd)
	}
	for _, ver := range append(append([]string(nil), metadata.OpenStackVersions...), "latest") {
		prefix := "openstack/" + ver + "/"
		d := make(dir, len(openStackFiles)+1)
		var listing []string
		for _, name := range openStackFiles {
			if name == "password" {
				// The password file exists from 2013-04-04 on; GET
				// returns the stored password, empty until the guest
				// posts one.
				if ver == "latest" || ver >= metadata.Grizzly {
					listing = append(listing, name)
					d[intern(name)] = entry{class: classPassword, password: true}
				}
				continue
			}
			body, ok := t.Get(prefix + name)
			if !ok {
				continue
			}
			listing = append(listing, name)
			e := entry{body: b.body(body), class: classOpenStackOther}
			switch name {
			case "meta_data.json":
				e.json, e.class = true, classOpenStackMetaData
			case "vendor_data.json", "vendor_data2.json":
				e.json = true
			}
			d[intern(name)] = e
		}
		if _, ok := t.Get(prefix + "meta_data.json"); !ok {
			return nil, fmt.Errorf("tree has no %smeta_data.json", prefix)
		}
		// Nova's _network_data has no version check: network_data.json
		// is served for every version, though listed only from
		// 2015-10-15.
		if _, ok := d["network_data.json"]; !ok && networkData != nil {
			d[intern("network_data.json")] = entry{body: networkData, class: classOpenStackOther}
		}
		d[""] = entry{body: b.text(strings.Join(listing, "\n")), class: classListing}
		v.os[ver] = share(d, v.os)
	}
	// Content blobs (injected files) live only on the config drive
	// (Tree.DriveOnly), so /openstack/content/... is always 404 here.

	// EC2: public-keys listings need key names, which Nova keeps in a
	// "_name" pseudo-key; vmeta takes them from meta_data.json's "keys".
	var md struct {
		Keys []struct {
			Name string `json:"name"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(t.Files["openstack/latest/meta_data.json"], &md); err != nil {
		return nil, fmt.Errorf("decode meta_data.json: %w", err)
	}
	for _, ver := range append(append([]string(nil), metadata.EC2Versions...), "latest") {
		prefix := "ec2/" + ver
		raw, ok := t.Get(prefix + "/meta-data.json")
		if !ok {
			return nil, fmt.Errorf("tree has no %s/meta-data.json", prefix)
		}
		var tree map[string]any
		if err := json.Unmarshal(raw, &tree); err != nil {
			return nil, fmt.Errorf("decode %s/meta-data.json: %w", prefix, err)
		}
		if pk, ok := tree["public-keys"].(map[string]any); ok {
			for idx, k := range md.Keys {
				if sub, ok := pk[strconv.Itoa(idx)].(map[string]any); ok {
					sub["_name"] = strconv.Itoa(idx) + "=" + k.Name
				}
			}
		}
		top := map[string]any{"meta-data": tree}
		if ud, ok := t.Get(prefix + "/user-data"); ok {
			top["user-data"] = string(ud)
		}
		d := make(dir)
		b.addEC2(d, "", top)
		v.ec2[ver] = share(d, v.ec2)
	}
	return v, nil
}

// addEC2 adds p (a path below the version, "" for the version itself) and
// everything below it, rendered as ec2_md_print does.
func (b *viewBuilder) addEC2(d dir, p string, data any) {
	text := func(s string) { d[intern(p)] = entry{body: b.text(s), class: classEC2} }
	switch v := data.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			if k != "_name" {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		lines := make([]string, 0, len(keys))
		for _, k := range keys {
			if sub, ok := v[k].(map[string]any); ok {
				if name, ok := sub["_name"].(string); ok {
					lines = append(lines, name)
				} else {
					lines = append(lines, k+"/")
				}
			} else {
				lines = append(lines, k)
			}
			sub := k
			if p != "" {
				sub = p + "/" + k
			}
			b.addEC2(d, sub, v[k])
		}
		d[intern(p)] = entry{body: b.text(strings.Join(lines, "\n")), class: classListing}
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
		text(strconv.FormatFloat(v, 'f', -1, 64))
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

// paths returns every normalized path (NormalizePath form) the view
// serves, sorted.
func (v *view) paths() []string {
	var out []string
	for top, tree := range map[string]map[string]dir{"openstack": v.os, "ec2": v.ec2} {
		for ver, d := range tree {
			for k := range d {
				p := top + "/" + ver
				if k != "" {
					p += "/" + k
				}
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}
