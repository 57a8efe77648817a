package types

// SnapshotRequest is the body of POST /v1/instances/{name}/snapshot: the
// stopped instance's root disk copied into a new image of the catalog.
type SnapshotRequest struct {
	// Image is the new image's name.
	Image string `json:"name"`
	// EncryptionKey is same (the default: a new secret with the root
	// disk's passphrase), new (a generated secret, the image
	// re-encrypted), existing (SecretUUID, a secret the instance's
	// project may read) or none (a plain image).
	EncryptionKey string `json:"encryption_key,omitempty"`
	// SecretUUID is the key-manager secret of encryption_key existing.
	SecretUUID string `json:"secret_uuid,omitempty"`
}

// The encryption_key choices of a snapshot (SnapshotRequest.EncryptionKey).
const (
	SnapshotKeySame     = "same"
	SnapshotKeyNew      = "new"
	SnapshotKeyExisting = "existing"
	SnapshotKeyNone     = "none"
)
