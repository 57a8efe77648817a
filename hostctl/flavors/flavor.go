package flavors

import (
	"encoding/json"
	"fmt"
	"time"
)

// Flavor is a flavor of the registry: Nova's sizes (RAM and swap in MiB,
// disks in GiB) and extra specs, among them hw:ephemeral_encryption and
// hw:ephemeral_encryption_format. The admin API shows it as a
// types.Flavor; the store keeps it as a flavorV1.
type Flavor struct {
	Name  string
	VCPUs int
	// RAM in MiB.
	RAM int
	// Disk is the root disk in GiB; 0 means the image's size.
	Disk int
	// Ephemeral is the blank ephemeral disk in GiB (none when 0).
	Ephemeral int
	// Swap is the swap disk in MiB (none when 0).
	Swap        int
	Description string
	ExtraSpecs  map[string]string
	// Created and Version are set by the registry (Version: the record's).
	Created time.Time
	Version int64
}

// flavorV1 is the stored format of a flavor record ("flavor/NAME"),
// version 1: the JSON names are what stores hold; change them only on
// purpose (a new version, read beside this one). testdata/flavor.v1.json
// is its golden file.
type flavorV1 struct {
	Name        string            `json:"name"`
	VCPUs       int               `json:"vcpus"`
	RAM         int               `json:"ram"`
	Disk        int               `json:"disk"`
	Ephemeral   int               `json:"ephemeral"`
	Swap        int               `json:"swap"`
	Description string            `json:"description,omitempty"`
	ExtraSpecs  map[string]string `json:"extra_specs,omitempty"`
	Created     time.Time         `json:"created_at"`
	// Version is never written (the record's version is the flavor's);
	// records written before the stored format was its own may hold 0.
	Version int64 `json:"version,omitempty"`
}

// encodeFlavor is the stored form of f (its Version is not stored).
func encodeFlavor(f Flavor) ([]byte, error) {
	b, err := json.Marshal(flavorV1{
		Name: f.Name, VCPUs: f.VCPUs, RAM: f.RAM, Disk: f.Disk, Ephemeral: f.Ephemeral, Swap: f.Swap,
		Description: f.Description, ExtraSpecs: f.ExtraSpecs, Created: f.Created,
	})
	if err != nil {
		return nil, fmt.Errorf("encode flavor %s: %w", f.Name, err)
	}
	return b, nil
}

// decodeFlavor reads a stored flavor; version is the record's.
func decodeFlavor(b []byte, version int64) (Flavor, error) {
	var s flavorV1
	if err := json.Unmarshal(b, &s); err != nil {
		return Flavor{}, err
	}
	return Flavor{
		Name: s.Name, VCPUs: s.VCPUs, RAM: s.RAM, Disk: s.Disk, Ephemeral: s.Ephemeral, Swap: s.Swap,
		Description: s.Description, ExtraSpecs: s.ExtraSpecs, Created: s.Created, Version: version,
	}, nil
}
