package types

import "github.com/vmeta/vmeta/hostctl/keyrotation"

// Key rotation's wire types are keyrotation's own (a leaf package: it
// links no controller).
type (
	// KeyPolicy is a class's (or an instance's) key rotation policy.
	KeyPolicy = keyrotation.Policy
	// KeyStatus is where a class's (or an instance's) keys are.
	KeyStatus = keyrotation.Status
	// KeyReport is a subject's policy and status (GET /v1/keys).
	KeyReport = keyrotation.Report
	// KeyRotation is POST /v1/keys/{class}/rotate: the new policy and
	// how many subjects it rotates (0: nothing to rotate).
	KeyRotation = keyrotation.Rotation
)

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
