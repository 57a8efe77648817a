package metadata

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Tree is the whole guest-visible file tree of one instance, keyed by
// slash-separated paths relative to the root of a config drive, e.g.
// "openstack/latest/meta_data.json", "openstack/content/0000",
// "ec2/2009-04-04/meta-data.json". It holds every OpenStack and every EC2
// version; ConfigDriveFiles selects what Nova writes to a drive.
type Tree struct {
	Files map[string][]byte `json:"files"`
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
		out = append(out, File{Path: p, Data: t.Files[p]})
	}
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
