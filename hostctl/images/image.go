package images

import (
	"encoding/json"
	"fmt"
	"time"
)

// Image is an image of the image directory: its file, what qemu-img says
// of it, and its properties (Glance's names: hw_ephemeral_encryption,
// hw_ephemeral_encryption_format, the os_encrypt_* and os_decrypt_*
// properties of an encrypted image, and any other property, kept as
// given). The admin API shows it as a types.Image; an imported image's
// sidecar keeps it as a sidecarV1.
type Image struct {
	Name string
	// File is the image file's name in the image directory.
	File string
	// Format is the file's format as qemu-img reports it (qcow2, raw).
	Format string
	// VirtualSize and Size are in bytes (the disk the guest sees; the
	// file on the host).
	VirtualSize int64
	Size        int64
	// Encrypted: qemu-img found the file encrypted (LUKS).
	Encrypted bool
	// Checksum is the SHA-256 of the file, hex.
	Checksum   string
	Properties map[string]string
	Created    time.Time
	// Legacy marks an image file put into the directory by hand: it has
	// no sidecar (no properties); instances may still name it.
	Legacy bool
}

// sidecarV1 is the stored format of an image's sidecar (NAME.json beside
// the image file), version 1: the JSON names are what image directories
// hold; change them only on purpose (a new version, read beside this
// one). testdata/sidecar.v1.json is its golden file. A sidecar's image
// is never legacy.
type sidecarV1 struct {
	Name        string            `json:"name"`
	File        string            `json:"file"`
	Format      string            `json:"disk_format"`
	VirtualSize int64             `json:"virtual_size"`
	Size        int64             `json:"size"`
	Encrypted   bool              `json:"encrypted,omitempty"`
	Checksum    string            `json:"checksum,omitempty"`
	Properties  map[string]string `json:"properties,omitempty"`
	Created     time.Time         `json:"created_at,omitzero"`
}

// encodeSidecar is the sidecar file of img (indented, newline-ended).
func encodeSidecar(img Image) ([]byte, error) {
	b, err := json.MarshalIndent(sidecarV1{
		Name: img.Name, File: img.File, Format: img.Format, VirtualSize: img.VirtualSize, Size: img.Size,
		Encrypted: img.Encrypted, Checksum: img.Checksum, Properties: img.Properties, Created: img.Created,
	}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode sidecar of %s: %w", img.Name, err)
	}
	return append(b, '\n'), nil
}

// decodeSidecar reads a sidecar file.
func decodeSidecar(b []byte) (Image, error) {
	var s sidecarV1
	if err := json.Unmarshal(b, &s); err != nil {
		return Image{}, err
	}
	return Image{
		Name: s.Name, File: s.File, Format: s.Format, VirtualSize: s.VirtualSize, Size: s.Size,
		Encrypted: s.Encrypted, Checksum: s.Checksum, Properties: s.Properties, Created: s.Created,
	}, nil
}
