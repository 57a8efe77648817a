package encryption

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
)

// BlockDevice is the block-device record of one disk hostctl created, as
// the specification's BlockDeviceMapping fields name it. Encrypted is true
// only for a disk created encrypted whose header qemu-img info confirmed
// and which its own passphrase opened; the guest is told exactly this.
// The admin API shows it as a types.BlockDevice; the store keeps an
// instance's records as a BlockDevices record (blockDevicesV1).
type BlockDevice struct {
	// Disk is the spec disk's target name (vda, sdb).
	Disk      string
	Encrypted bool
	// EncryptionSecretUUID is the key-manager secret holding the disk's
	// passphrase (also the UUID of the libvirt secret that hands it to
	// QEMU while the domain runs).
	EncryptionSecretUUID string
	// BackingEncryptionSecretUUID is the secret of an encrypted qcow2
	// backing file (none: backing files of blank disks and of plain
	// images are never encrypted).
	BackingEncryptionSecretUUID string
	// EncryptionFormat is FormatLUKS (LUKS1 inside qcow2) for an
	// encrypted disk.
	EncryptionFormat string
	// EncryptionOptions are read back from the disk's header with
	// qemu-img info: cipher, mode, hash, ivgen (ivgen_hash), key_size
	// (master key bits).
	EncryptionOptions map[string]string
	// Created is when hostctl created the disk.
	Created time.Time
	// KeyGeneration is the generation of the disk's passphrase, raised by
	// each passphrase rotation (0: never rotated); KeySlot the LUKS key
	// slot that passphrase is in (nil: never rotated, slot 0 as qemu-img
	// create writes it). KeyRotation is a rotation in progress.
	KeyGeneration int64
	KeySlot       *int
	KeyRotation   *DiskKeyRotation
}

// SecretUUIDs are the key-manager secrets the record holds: its own and
// its backing file's copy.
func (d BlockDevice) SecretUUIDs() []string {
	var ids []string
	for _, id := range []string{d.EncryptionSecretUUID, d.BackingEncryptionSecretUUID} {
		if id != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

// SecretUUIDs are the key-manager secrets the instance's disks hold,
// sorted, each once.
func (b BlockDevices) SecretUUIDs() []string {
	var ids []string
	for _, d := range b.Disks {
		ids = append(ids, d.SecretUUIDs()...)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// DiskKeyRotation is the journal of a disk passphrase rotation in
// progress: the generation it reaches and the free key slot chosen for
// the new (pending) passphrase, recorded before the slot is written.
type DiskKeyRotation struct {
	Generation int64
	Slot       int
}

// BlockDevices is an instance's block-device records, one store record
// ("blockdev/UUID"): the instance's name, the host that wrote it, and the
// records by disk.
type BlockDevices struct {
	Instance string
	Host     string
	Disks    map[string]BlockDevice
}

// blockDevicesV1 is the stored format of BlockDevices, version 1: the
// JSON names are what stores hold; change them only on purpose (a new
// version, read beside this one). testdata/blockdevices.v1.json is its
// golden file.
type blockDevicesV1 struct {
	Instance string                   `json:"instance"`
	Host     string                   `json:"host,omitempty"`
	Disks    map[string]blockDeviceV1 `json:"disks"`
}

type blockDeviceV1 struct {
	Disk                        string             `json:"disk"`
	Encrypted                   bool               `json:"encrypted"`
	EncryptionSecretUUID        string             `json:"encryption_secret_uuid,omitempty"`
	BackingEncryptionSecretUUID string             `json:"backing_encryption_secret_uuid,omitempty"`
	EncryptionFormat            string             `json:"encryption_format,omitempty"`
	EncryptionOptions           map[string]string  `json:"encryption_options,omitempty"`
	Created                     time.Time          `json:"created,omitzero"`
	KeyGeneration               int64              `json:"key_generation,omitempty"`
	KeySlot                     *int               `json:"key_slot,omitempty"`
	KeyRotation                 *diskKeyRotationV1 `json:"key_rotation,omitempty"`
}

type diskKeyRotationV1 struct {
	Generation int64 `json:"generation"`
	Slot       int   `json:"slot"`
}

// EncodeBlockDevices is the stored form of rec.
func EncodeBlockDevices(rec BlockDevices) ([]byte, error) {
	v := blockDevicesV1{Instance: rec.Instance, Host: rec.Host, Disks: make(map[string]blockDeviceV1, len(rec.Disks))}
	for name, bd := range rec.Disks {
		d := blockDeviceV1{
			Disk: bd.Disk, Encrypted: bd.Encrypted, EncryptionSecretUUID: bd.EncryptionSecretUUID,
			BackingEncryptionSecretUUID: bd.BackingEncryptionSecretUUID, EncryptionFormat: bd.EncryptionFormat,
			EncryptionOptions: bd.EncryptionOptions, Created: bd.Created, KeyGeneration: bd.KeyGeneration, KeySlot: bd.KeySlot,
		}
		if kr := bd.KeyRotation; kr != nil {
			d.KeyRotation = &diskKeyRotationV1{Generation: kr.Generation, Slot: kr.Slot}
		}
		v.Disks[name] = d
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode block devices of %s: %w", rec.Instance, err)
	}
	return b, nil
}

// DecodeBlockDevices reads a stored BlockDevices record; Disks is never
// nil.
func DecodeBlockDevices(b []byte) (BlockDevices, error) {
	var v blockDevicesV1
	if err := json.Unmarshal(b, &v); err != nil {
		return BlockDevices{Disks: map[string]BlockDevice{}}, err
	}
	rec := BlockDevices{Instance: v.Instance, Host: v.Host, Disks: make(map[string]BlockDevice, len(v.Disks))}
	for name, d := range v.Disks {
		bd := BlockDevice{
			Disk: d.Disk, Encrypted: d.Encrypted, EncryptionSecretUUID: d.EncryptionSecretUUID,
			BackingEncryptionSecretUUID: d.BackingEncryptionSecretUUID, EncryptionFormat: d.EncryptionFormat,
			EncryptionOptions: maps.Clone(d.EncryptionOptions), Created: d.Created, KeyGeneration: d.KeyGeneration, KeySlot: d.KeySlot,
		}
		if kr := d.KeyRotation; kr != nil {
			bd.KeyRotation = &DiskKeyRotation{Generation: kr.Generation, Slot: kr.Slot}
		}
		rec.Disks[name] = bd
	}
	return rec, nil
}

// MarshalJSON writes the stored format (EncodeBlockDevices), so that a
// record marshalled by hand is still the record.
func (rec BlockDevices) MarshalJSON() ([]byte, error) { return EncodeBlockDevices(rec) }

// UnmarshalJSON reads the stored format (DecodeBlockDevices), so that a
// record unmarshalled by hand reads whole: the domain struct has no JSON
// names of its own.
func (rec *BlockDevices) UnmarshalJSON(b []byte) error {
	r, err := DecodeBlockDevices(b)
	if err != nil {
		return err
	}
	*rec = r
	return nil
}
