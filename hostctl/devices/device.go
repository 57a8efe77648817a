package devices

import (
	"encoding/json"
	"fmt"
	"time"
)

// TraitOneTimeUse is the trait of a one-time-use device (Nova's name).
const TraitOneTimeUse = "HW_PCI_ONE_TIME_USE"

// Device is the inventory record of one passthrough PCI device of a
// host: placement's counters for a provider of one whole device (total
// 1) plus what hostctl knows about it. The admin API shows it as a
// types.Device; the store, the device events and the cleanup hook's
// input carry it as a deviceV1.
type Device struct {
	Address   string
	Host      string
	VendorID  string
	ProductID string
	Class     string
	// Alias is the device_spec alias instance specs request it by; empty
	// for a one-time-use device an instance named directly in pci_devices.
	Alias string

	// Total is 1 (one whole device); Reserved is total while burned;
	// Used is 1 while an instance holds it. Capacity is total - reserved.
	Total    int
	Reserved int
	Used     int
	Traits   []string

	OneTimeUse     bool
	LiveMigratable bool
	// Present is false for a device the last sync did not find in sysfs
	// or the device spec no longer matches (or never matched: a device
	// named directly in pci_devices): it is kept (it may be burned or in
	// use) but never claimed by an alias.
	Present bool

	// Consumer is the UUID of the instance using it; ConsumerName its
	// name, kept after release (the instance that used it last).
	Consumer     string
	ConsumerName string

	// NeedsCleaning: reserved == total and used == 0, by the counters
	// alone (a device burned while one-time-use, whatever its traits now).
	NeedsCleaning bool

	BurnedAt   *time.Time
	ReleasedAt *time.Time
	CleanedAt  *time.Time
	// LastCleanupHook is how the cleanup hook run for the last release
	// ended.
	LastCleanupHook *HookResult

	// Generation is the record's version: it grows by one on every
	// change (optimistic concurrency, as placement's provider
	// generation).
	Generation int64
}

// HookResult is the outcome of one cleanup hook run.
type HookResult struct {
	// Outcome is HookOK, HookFailed, HookTimeout, HookGarbage, HookError
	// or HookSkipped.
	Outcome string
	Message string
	At      time.Time
}

// deviceV1 is the stored format of a device record ("device/ADDRESS" of
// the host's group), version 1, and the body of the device events and of
// the cleanup hook's input: the JSON names are what stores, event streams
// and hooks hold; change them only on purpose (a new version, read beside
// this one). testdata/device.v1.json is its golden file. In the store
// generation is 0 (the record's version is the generation) and
// needs_cleaning follows the counters; both are written as they were
// before this format had its own struct.
type deviceV1 struct {
	Address         string        `json:"address"`
	Host            string        `json:"host"`
	VendorID        string        `json:"vendor_id"`
	ProductID       string        `json:"product_id"`
	Class           string        `json:"class,omitempty"`
	Alias           string        `json:"alias"`
	Total           int           `json:"total"`
	Reserved        int           `json:"reserved"`
	Used            int           `json:"used"`
	Traits          []string      `json:"traits"`
	OneTimeUse      bool          `json:"one_time_use"`
	LiveMigratable  bool          `json:"live_migratable"`
	Present         bool          `json:"present"`
	Consumer        string        `json:"consumer,omitempty"`
	ConsumerName    string        `json:"consumer_name,omitempty"`
	NeedsCleaning   bool          `json:"needs_cleaning"`
	BurnedAt        *time.Time    `json:"burned_at,omitempty"`
	ReleasedAt      *time.Time    `json:"released_at,omitempty"`
	CleanedAt       *time.Time    `json:"cleaned_at,omitempty"`
	LastCleanupHook *hookResultV1 `json:"last_cleanup_hook,omitempty"`
	Generation      int64         `json:"generation"`
}

type hookResultV1 struct {
	Outcome string    `json:"outcome"`
	Message string    `json:"message,omitempty"`
	At      time.Time `json:"at"`
}

func toV1(d Device) deviceV1 {
	v := deviceV1{
		Address: d.Address, Host: d.Host, VendorID: d.VendorID, ProductID: d.ProductID, Class: d.Class, Alias: d.Alias,
		Total: d.Total, Reserved: d.Reserved, Used: d.Used, Traits: d.Traits,
		OneTimeUse: d.OneTimeUse, LiveMigratable: d.LiveMigratable, Present: d.Present,
		Consumer: d.Consumer, ConsumerName: d.ConsumerName, NeedsCleaning: d.NeedsCleaning,
		BurnedAt: d.BurnedAt, ReleasedAt: d.ReleasedAt, CleanedAt: d.CleanedAt, Generation: d.Generation,
	}
	if h := d.LastCleanupHook; h != nil {
		v.LastCleanupHook = &hookResultV1{Outcome: h.Outcome, Message: h.Message, At: h.At}
	}
	return v
}

// encodeDevice is d in its stored format (deviceV1), as records, device
// events and the cleanup hook's input carry it.
func encodeDevice(d Device) ([]byte, error) {
	b, err := json.Marshal(toV1(d))
	if err != nil {
		return nil, fmt.Errorf("encode device %s: %w", d.Address, err)
	}
	return b, nil
}

// decodeDevice reads a stored device record.
func decodeDevice(b []byte) (Device, error) {
	var v deviceV1
	if err := json.Unmarshal(b, &v); err != nil {
		return Device{}, err
	}
	d := Device{
		Address: v.Address, Host: v.Host, VendorID: v.VendorID, ProductID: v.ProductID, Class: v.Class, Alias: v.Alias,
		Total: v.Total, Reserved: v.Reserved, Used: v.Used, Traits: v.Traits,
		OneTimeUse: v.OneTimeUse, LiveMigratable: v.LiveMigratable, Present: v.Present,
		Consumer: v.Consumer, ConsumerName: v.ConsumerName, NeedsCleaning: v.NeedsCleaning,
		BurnedAt: v.BurnedAt, ReleasedAt: v.ReleasedAt, CleanedAt: v.CleanedAt, Generation: v.Generation,
	}
	if h := v.LastCleanupHook; h != nil {
		d.LastCleanupHook = &HookResult{Outcome: h.Outcome, Message: h.Message, At: h.At}
	}
	return d, nil
}
