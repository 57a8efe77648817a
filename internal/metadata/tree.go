package metadata

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
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

// Encode serializes a tree for the store.
func (t *Tree) Encode() ([]byte, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("encode tree: %w", err)
	}
	return b, nil
}

// DecodeTree parses a tree serialized by Encode.
func DecodeTree(b []byte) (*Tree, error) {
	var t Tree
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("decode tree: %w", err)
	}
	if t.Files == nil {
		return nil, fmt.Errorf("decode tree: no files")
	}
	return &t, nil
}
