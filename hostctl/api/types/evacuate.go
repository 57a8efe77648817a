package types

import "time"

// EvacuateRequest is the body of POST /v1/instances/{name}/evacuate:
// the host to rebuild the instance on (the host whose API is asked).
type EvacuateRequest struct {
	Host string `json:"host"`
}

// Evacuation is an instance's evacuation from a down host (issue 24):
// State is evacuating while the new host rebuilds it (or stopped at
// Step, Error saying why), evacuated once it runs there and until its old
// host comes back and removes its copy (cleaning while it does).
type Evacuation struct {
	Instance string `json:"instance"`
	UUID     string `json:"uuid"`
	Source   string `json:"source"`
	Dest     string `json:"dest"`
	State    string `json:"state"`
	Step     string `json:"step"`
	Error    string `json:"error,omitempty"`
	// OldSecrets counts the key-manager secrets of the old host's disks,
	// which that host deletes when it comes back.
	OldSecrets int       `json:"old_secrets"`
	Started    time.Time `json:"started"`
	Updated    time.Time `json:"updated"`
}
