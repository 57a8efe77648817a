package types

import "time"

// MigrateRequest is the body of POST /v1/instances/{name}/migrate: the
// host the instance moves to (cold migration, issue 24).
type MigrateRequest struct {
	Host string `json:"host"`
	// TimeoutSeconds is how long a running guest has to shut down before
	// its domain is powered off (as POST …/stop); 30 when 0.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
	// Live: the running instance moves through libvirt's live migration
	// (it keeps running; no verify).
	Live bool `json:"live,omitempty"`
}

// Migration is a move of an instance between hosts, as POST
// …/migrate, …/confirm-migration, …/revert-migration and GET
// …/migration answer it. State is migrating, verify, confirming or
// reverting while the move lasts; "" once a confirm or a revert ended it.
type Migration struct {
	Instance string `json:"instance"`
	UUID     string `json:"uuid"`
	Source   string `json:"source"`
	Dest     string `json:"dest"`
	State    string `json:"state"`
	// Step is the last step done; Error why the last attempt stopped.
	Step       string          `json:"step"`
	Error      string          `json:"error,omitempty"`
	WasRunning bool            `json:"was_running"`
	Disks      []MigrationDisk `json:"disks,omitempty"`
	// Bytes is how many bytes of disk were copied, CopySeconds how long
	// the copy took.
	Bytes       int64     `json:"bytes"`
	CopySeconds float64   `json:"copy_seconds"`
	Started     time.Time `json:"started"`
	Updated     time.Time `json:"updated"`
	// Live: a live migration; SwitchSeconds is how long libvirt's
	// migration took.
	Live          bool    `json:"live,omitempty"`
	SwitchSeconds float64 `json:"switch_seconds,omitempty"`
}

// MigrationDisk is a file a move copies.
type MigrationDisk struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256,omitempty"`
	Backing string `json:"backing,omitempty"`
}
