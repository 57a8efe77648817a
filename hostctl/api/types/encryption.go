package types

import "time"

// BlockDevice is the block-device record of one disk hostctl created, as
// the specification's BlockDeviceMapping fields name it. Encrypted is true
// only for a disk created encrypted whose header qemu-img info confirmed
// and which its own passphrase opened; the guest is told exactly this.
type BlockDevice struct {
	// Disk is the spec disk's target name (vda, sdb).
	Disk      string `json:"disk"`
	Encrypted bool   `json:"encrypted"`
	// EncryptionSecretUUID is the key-manager secret holding the disk's
	// passphrase (also the UUID of the libvirt secret that hands it to
	// QEMU while the domain runs).
	EncryptionSecretUUID string `json:"encryption_secret_uuid,omitempty"`
	// BackingEncryptionSecretUUID is the secret of an encrypted qcow2
	// backing file (none: backing files of blank disks and of plain
	// images are never encrypted).
	BackingEncryptionSecretUUID string `json:"backing_encryption_secret_uuid,omitempty"`
	// EncryptionFormat is "luks" (LUKS1 inside qcow2) for an encrypted
	// disk.
	EncryptionFormat string `json:"encryption_format,omitempty"`
	// EncryptionOptions are read back from the disk's header with
	// qemu-img info: cipher, mode, hash, ivgen (ivgen_hash), key_size
	// (master key bits).
	EncryptionOptions map[string]string `json:"encryption_options,omitempty"`
	// Created is when hostctl created the disk.
	Created time.Time `json:"created,omitzero"`
	// KeyGeneration is the generation of the disk's passphrase, raised by
	// each passphrase rotation (0: never rotated); KeySlot the LUKS key
	// slot that passphrase is in (nil: never rotated, slot 0 as qemu-img
	// create writes it). KeyRotation is a rotation in progress.
	KeyGeneration int64            `json:"key_generation,omitempty"`
	KeySlot       *int             `json:"key_slot,omitempty"`
	KeyRotation   *DiskKeyRotation `json:"key_rotation,omitempty"`
}

// DiskKeyRotation is the journal of a disk passphrase rotation in
// progress: the generation it reaches and the free key slot chosen for
// the new (pending) passphrase, recorded before the slot is written.
type DiskKeyRotation struct {
	Generation int64 `json:"generation"`
	Slot       int   `json:"slot"`
}

// Secret is a key-manager secret's metadata (never its value).
type Secret struct {
	UUID      string    `json:"uuid"`
	Name      string    `json:"name,omitempty"`
	ProjectID string    `json:"project_id,omitempty"`
	Type      string    `json:"secret_type"`
	Created   time.Time `json:"created"`
	// Instance and Disk name what the secret was made for (a disk's
	// secret goes with the disk); empty for a user's secret.
	InstanceUUID string `json:"instance_uuid,omitempty"`
	InstanceName string `json:"instance_name,omitempty"`
	Disk         string `json:"disk,omitempty"`
	// KeyID and KeyGeneration name the key-encryption key that wraps it.
	KeyID         string `json:"key_id"`
	KeyGeneration int64  `json:"key_generation"`
}

// SecretRequest creates a secret (POST /v1/secrets).
type SecretRequest struct {
	Name string `json:"name,omitempty"`
	// ProjectID owns the secret; a member's own project when empty (an
	// administrator must name one).
	ProjectID string `json:"project_id,omitempty"`
	// Payload is the passphrase a user brings (base64 in JSON); one is
	// generated when it is absent. It is never returned.
	Payload []byte `json:"payload,omitempty"`
}
