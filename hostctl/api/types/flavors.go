package types

import "time"

// Flavor is a flavor as the admin API shows it: Nova's sizes (RAM and
// swap in MiB, disks in GiB) and extra specs, among them
// hw:ephemeral_encryption and hw:ephemeral_encryption_format.
type Flavor struct {
	Name  string `json:"name"`
	VCPUs int    `json:"vcpus"`
	// RAM in MiB.
	RAM int `json:"ram"`
	// Disk is the root disk in GiB; 0 means the image's size.
	Disk int `json:"disk"`
	// Ephemeral is the blank ephemeral disk in GiB (none when 0).
	Ephemeral int `json:"ephemeral"`
	// Swap is the swap disk in MiB (none when 0).
	Swap        int               `json:"swap"`
	Description string            `json:"description,omitempty"`
	ExtraSpecs  map[string]string `json:"extra_specs,omitempty"`
	// Created and Version are set by the store (Version: the record's).
	Created time.Time `json:"created_at"`
	Version int64     `json:"version,omitempty"`
}

// Image is an image of the host's image directory as the admin API shows
// it: its file, what qemu-img says of it, and its properties (Glance's
// names: hw_ephemeral_encryption, hw_ephemeral_encryption_format, the
// os_encrypt_* and os_decrypt_* properties of an encrypted image, and
// any other property, kept as given).
type Image struct {
	Name string `json:"name"`
	// File is the image file's name in the image directory.
	File string `json:"file"`
	// Format is the file's format as qemu-img reports it (qcow2, raw).
	Format string `json:"disk_format"`
	// VirtualSize and Size are in bytes (the disk the guest sees; the
	// file on the host).
	VirtualSize int64 `json:"virtual_size"`
	Size        int64 `json:"size"`
	// Encrypted: qemu-img found the file encrypted (LUKS).
	Encrypted bool `json:"encrypted,omitempty"`
	// Checksum is the SHA-256 of the file, hex.
	Checksum   string            `json:"checksum,omitempty"`
	Properties map[string]string `json:"properties,omitempty"`
	Created    time.Time         `json:"created_at,omitzero"`
	// Legacy marks an image file put into the directory by hand: it has
	// no sidecar (no properties); instances may still name it.
	Legacy bool `json:"legacy,omitempty"`
}

// ImageImport is the metadata part of POST /v1/images (multipart: a
// part "image" with this JSON, then a part "file" with the image data).
type ImageImport struct {
	Name       string            `json:"name"`
	Properties map[string]string `json:"properties,omitempty"`
}

// ResizeRequest is the body of POST /v1/instances/{name}/resize.
type ResizeRequest struct {
	Flavor string `json:"flavor"`
}

// RebuildRequest is the body of POST /v1/instances/{name}/rebuild.
type RebuildRequest struct {
	Image string `json:"image"`
}
