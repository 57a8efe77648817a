package server

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/vmeta/vmeta/internal/metadata"
)

// A view builds its directories from the instance's tree in its stored
// form (metadata.Tree.Encode: each distinct file once, deflated), kept
// as the store returned it: the server has no format of its own. A
// version's directory is built by decoding the tree again on the
// version's first request; once every directory is built, the stored
// form is dropped.

// The files a version is built from, by column (see fileOf). osFiles is
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

// filePaths holds, per version index, the tree's path of each file of
// osFiles or ec2Files (built once: a view's build looks files up without
// making their paths).
var filePaths = func() [][]string {
	out := make([][]string, numVersions)
	for i := range out {
		top, ver := versionName(i)
		names := osFiles
		if !isOSVersion(i) {
			names = ec2Files
		}
		for _, n := range names {
			out[i] = append(out[i], top+"/"+ver+"/"+n)
		}
	}
	return out
}()

// fileOf returns file col (of osFiles or ec2Files) of version index i.
func fileOf(t *metadata.Tree, i, col int) ([]byte, bool) {
	if col >= len(filePaths[i]) {
		return nil, false
	}
	return t.Get(filePaths[i][col])
}

// checkTree checks a decoded tree (every version the server serves must
// be there, and what is decoded when a version is built must decode)
// and returns, per version index, the index of the version whose
// directory it shares: itself, or the first version with the same files
// (and, for OpenStack, the same password file); and the names of the
// public keys (keyNames).
func checkTree(t *metadata.Tree) ([]uint8, []string, error) {
	for i, ver := range osVersions {
		if _, ok := fileOf(t, i, colMetaData); !ok {
			return nil, nil, fmt.Errorf("tree has no openstack/%s/meta_data.json", ver)
		}
	}
	md, _ := fileOf(t, len(osVersions)-1, colMetaData)
	keys, err := keyNames(md)
	if err != nil {
		return nil, nil, err
	}
	var checked [][]byte
	for j, ver := range ec2Versions {
		raw, ok := fileOf(t, len(osVersions)+j, colMetaData)
		if !ok {
			return nil, nil, fmt.Errorf("tree has no ec2/%s/meta-data.json", ver)
		}
		if containsBytes(checked, raw) {
			continue
		}
		// Decoded when the version is first asked for; what would not
		// decode is refused now, with the document.
		if err := checkObject(raw); err != nil {
			return nil, nil, fmt.Errorf("decode ec2/%s/meta-data.json: %w", ver, err)
		}
		checked = append(checked, raw)
	}
	same := func(i, j int) bool {
		if isOSVersion(i) != isOSVersion(j) ||
			(isOSVersion(i) && hasPassword(osVersions[i]) != hasPassword(osVersions[j])) {
			return false
		}
		for col := range osFiles {
			a, aok := fileOf(t, i, col)
			b, bok := fileOf(t, j, col)
			if aok != bok || !bytes.Equal(a, b) {
				return false
			}
		}
		return true
	}
	reps := make([]uint8, numVersions)
	for i := range numVersions {
		reps[i] = uint8(i)
		for j := range i {
			if same(i, j) {
				reps[i] = uint8(j)
				break
			}
		}
	}
	return reps, keys, nil
}

func containsBytes(list [][]byte, b []byte) bool {
	for _, x := range list {
		if bytes.Equal(x, b) {
			return true
		}
	}
	return false
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
	if len(md.Keys) == 0 {
		return nil, nil
	}
	names := make([]string, len(md.Keys))
	for i, k := range md.Keys {
		names[i] = k.Name
	}
	return names, nil
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
