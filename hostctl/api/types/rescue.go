package types

// RescueRequest is the body of POST /v1/instances/{name}/rescue: the
// instance boots a rescue disk made from Image, its root disk attached
// as the second disk.
type RescueRequest struct {
	// Image is the catalog image the rescue disk is made from; the rescue
	// disk is encrypted if and only if the image is.
	Image string `json:"image"`
}
