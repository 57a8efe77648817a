package types

import "time"

// Key rotation policies (KeyPolicy.KeyRotationPolicy).
const (
	// KeyPolicyDisabled (or empty): keys are not rotated after their
	// creation.
	KeyPolicyDisabled = "Disabled"
	// KeyPolicyWithVersionUpgrade: rotate when hostctl runs a newer
	// version than the one that minted the keys.
	KeyPolicyWithVersionUpgrade = "WithVersionUpgrade"
	// KeyPolicyKeyGeneration: rotate when the wanted generation is above
	// the status generation.
	KeyPolicyKeyGeneration = "KeyGeneration"
)

// KeyPolicy is a class's (or an instance's) key rotation policy
// (PUT /v1/keys/{class}/policy).
type KeyPolicy struct {
	KeyRotationPolicy string `json:"keyRotationPolicy,omitempty"`
	// KeyGeneration is the wanted generation (policy KeyGeneration).
	KeyGeneration int64 `json:"keyGeneration,omitempty"`
	// KeepPriorKeyCount is how many prior keys stay valid (overlapping
	// classes only; nil: 1).
	KeepPriorKeyCount *int `json:"keepPriorKeyCount,omitempty"`
}

// KeyStatus is where a class's (or an instance's) keys are.
type KeyStatus struct {
	// KeyGeneration: 1 when the keys were first created, +1 per
	// rotation; 0: the keys existed before rotation was tracked.
	KeyGeneration int64 `json:"keyGeneration"`
	// KeyVersion is the vmeta version that minted the keys in use.
	KeyVersion string `json:"keyVersion"`
	// KeyCephVersion is the Ceph version that minted the keys in use
	// (class cephx).
	KeyCephVersion string `json:"keyCephVersion,omitempty"`
	// PriorKeyCount is how many prior keys are still valid (overlapping
	// classes).
	PriorKeyCount *int `json:"priorKeyCount,omitempty"`
	// Pending says why a begun rotation (Target) waits.
	Pending string `json:"pending,omitempty"`
	// Progress of a rotation in progress.
	Progress *KeyProgress `json:"progress,omitempty"`
	// Target is the generation of a rotation begun and not yet finished.
	Target int64 `json:"target,omitempty"`
	// Error is the last rotation attempt's failure, if it failed.
	Error string `json:"error,omitempty"`
	// Updated is when the status last changed.
	Updated time.Time `json:"updated"`
}

// KeyProgress counts the items of a rotation (secrets rewrapped, disks
// re-keyed); it is also the payload of the key rotation progress events.
type KeyProgress struct {
	Done  int `json:"done"`
	Total int `json:"total"`
}

// KeyReport is a subject's policy and status (GET /v1/keys).
type KeyReport struct {
	// Class is the key class; InstanceUUID and InstanceName name the
	// instance of a per-instance class (disk-passphrases).
	Class        string    `json:"class"`
	InstanceUUID string    `json:"instance_uuid,omitempty"`
	InstanceName string    `json:"instance_name,omitempty"`
	Policy       KeyPolicy `json:"policy"`
	Status       KeyStatus `json:"status"`
	// Complete: the status generation has reached the wanted one and
	// nothing is pending.
	Complete bool `json:"complete"`
	// NoKeys says why the class has no keys on this host yet ("": it
	// has).
	NoKeys string `json:"no_keys,omitempty"`
	// Holders are the instances still holding a prior key (class cephx:
	// share mounts made with a prior CephX client generation).
	Holders []KeyHolder `json:"holders,omitempty"`
}

// KeyHolder is an instance holding a prior key: its CephFS share mounted
// with a prior generation of the host's CephX client.
type KeyHolder struct {
	InstanceUUID string `json:"instance_uuid"`
	ShareID      string `json:"share_id"`
	Generation   int64  `json:"generation"`
	Client       string `json:"client"`
}

// KeyRotation is POST /v1/keys/{class}/rotate: the new policy and how
// many subjects it rotates (0: nothing to rotate).
type KeyRotation struct {
	KeyPolicy
	Subjects int `json:"subjects"`
}

// KeyPruneRequest is POST /v1/keys/{class}/prune.
type KeyPruneRequest struct {
	// Keep is how many prior keys stay valid.
	Keep int `json:"keep"`
}

// KeyReveal is GET /v1/keys/proxy-secret/reveal: the current proxy
// secret, for the proxies' configuration (administrators only).
type KeyReveal struct {
	Class  string `json:"class"`
	Secret string `json:"secret"`
}
