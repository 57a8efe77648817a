package server

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/vmeta/vmeta/internal/metadata"
)

// Content types Nova sends: JSON documents are application/json, every
// other file (network_data.json included) and every listing text/plain.
const (
	contentJSON = "application/json"
	contentText = "text/plain; charset=UTF-8"
)

// entry is one servable path of an instance.
type entry struct {
	body        []byte
	contentType string
}

// view is every path an instance's guest may GET, precomputed from its
// tree so that serving a request is a map lookup. Keys are normalized
// paths without the leading slash, with Nova's "ec2/" prefix rule applied
// ("ec2/2009-04-04/meta-data/hostname", "openstack/latest/meta_data.json").
type view struct {
	version int64
	uuid    string
	paths   map[string]entry
}

// buildView renders the HTTP view of a tree (Nova's lookup,
// get_openstack_item, get_ec2_item and ec2_md_print).
func buildView(t *metadata.Tree, uuid string, version int64) (*view, error) {
	v := &view{version: version, uuid: uuid, paths: make(map[string]entry, 512)}

	// OpenStack: listings and files per version.
	for _, ver := range append(append([]string(nil), metadata.OpenStackVersions...), "latest") {
		dir := "openstack/" + ver
		var listing []string
		for _, name := range []string{"meta_data.json", "user_data", "password", "vendor_data.json", "network_data.json", "vendor_data2.json"} {
			if name == "password" {
				// The password file exists from 2013-04-04 on; GET
				// returns the stored password, empty until the guest
				// posts one.
				if ver == "latest" || ver >= metadata.Grizzly {
					listing = append(listing, name)
					v.paths[dir+"/password"] = entry{body: nil, contentType: contentText}
				}
				continue
			}
			b, ok := t.Get(dir + "/" + name)
			if !ok {
				continue
			}
			listing = append(listing, name)
			ct := contentText
			if name == "meta_data.json" || name == "vendor_data.json" || name == "vendor_data2.json" {
				ct = contentJSON
			}
			v.paths[dir+"/"+name] = entry{body: b, contentType: ct}
		}
		if _, ok := t.Get(dir + "/meta_data.json"); !ok {
			return nil, fmt.Errorf("tree has no %s/meta_data.json", dir)
		}
		v.paths[dir] = textEntry(strings.Join(listing, "\n"))
	}
	// Nova's _network_data has no version check: network_data.json is
	// served for every version, though listed only from 2015-10-15.
	if nd, ok := t.Get("openstack/latest/network_data.json"); ok {
		for _, ver := range metadata.OpenStackVersions {
			if ver < metadata.Liberty {
				v.paths["openstack/"+ver+"/network_data.json"] = entry{body: nd, contentType: contentText}
			}
		}
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
		dir := "ec2/" + ver
		raw, ok := t.Get(dir + "/meta-data.json")
		if !ok {
			return nil, fmt.Errorf("tree has no %s/meta-data.json", dir)
		}
		var tree map[string]any
		if err := json.Unmarshal(raw, &tree); err != nil {
			return nil, fmt.Errorf("decode %s/meta-data.json: %w", dir, err)
		}
		if pk, ok := tree["public-keys"].(map[string]any); ok {
			for idx, k := range md.Keys {
				if sub, ok := pk[strconv.Itoa(idx)].(map[string]any); ok {
					sub["_name"] = strconv.Itoa(idx) + "=" + k.Name
				}
			}
		}
		top := map[string]any{"meta-data": tree}
		if ud, ok := t.Get(dir + "/user-data"); ok {
			top["user-data"] = string(ud)
		}
		v.addEC2(dir, top)
	}
	return v, nil
}

func textEntry(s string) entry { return entry{body: []byte(s), contentType: contentText} }

// addEC2 adds p and everything below it, rendered as ec2_md_print does.
func (v *view) addEC2(p string, data any) {
	switch d := data.(type) {
	case map[string]any:
		keys := make([]string, 0, len(d))
		for k := range d {
			if k != "_name" {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		lines := make([]string, 0, len(keys))
		for _, k := range keys {
			if sub, ok := d[k].(map[string]any); ok {
				if name, ok := sub["_name"].(string); ok {
					lines = append(lines, name)
				} else {
					lines = append(lines, k+"/")
				}
			} else {
				lines = append(lines, k)
			}
			v.addEC2(p+"/"+k, d[k])
		}
		v.paths[p] = textEntry(strings.Join(lines, "\n"))
	case []any:
		items := make([]string, len(d))
		for i, it := range d {
			items[i] = fmt.Sprint(it)
		}
		v.paths[p] = textEntry(strings.Join(items, "\n"))
	case string:
		v.paths[p] = textEntry(d)
	case nil:
		v.paths[p] = textEntry("None") // Python's str(None), as Nova prints it
	case float64:
		v.paths[p] = textEntry(strconv.FormatFloat(d, 'f', -1, 64))
	case bool:
		if d {
			v.paths[p] = textEntry("True")
		} else {
			v.paths[p] = textEntry("False")
		}
	default:
		v.paths[p] = textEntry(fmt.Sprint(d))
	}
}
