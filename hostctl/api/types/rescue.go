package types

// RescueRequest is the body of POST /v1/instances/{name}/rescue: the
// instance boots a rescue disk made from Image, its root disk attached
// as the second disk.
type RescueRequest struct {
	// Image is the catalog image the rescue disk is made from; the rescue
	// disk is encrypted if and only if the image is.
	Image string `json:"image"`
	// TimeoutSeconds is how long a running guest has to shut down before
	// its domain is powered off (as POST …/stop); 30 when 0.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
}
