package model

import "encoding/json"

// markUnencrypted sets Disk.Unencrypted on the disks of in whose entry in
// the spec js (JSON, already decoded into in) says `encrypted: false`
// explicitly: a bool field alone cannot tell that from an omitted one.
func markUnencrypted(js []byte, in *Instance) {
	var raw struct {
		Disks []struct {
			Encrypted *bool `json:"encrypted"`
		} `json:"disks"`
	}
	if json.Unmarshal(js, &raw) != nil {
		return
	}
	for i, d := range raw.Disks {
		if i < len(in.Disks) && d.Encrypted != nil && !*d.Encrypted {
			in.Disks[i].Unencrypted = true
		}
	}
}
