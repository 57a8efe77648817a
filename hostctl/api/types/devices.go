package types

import "time"

// TraitOneTimeUse is the trait of a one-time-use device (Nova's name).
const TraitOneTimeUse = "HW_PCI_ONE_TIME_USE"

// Device is the inventory record of one passthrough PCI device of a host
// (GET /v1/devices): placement's counters for a provider of one whole
// device (total 1) plus what hostctl knows about it.
type Device struct {
	Address   string `json:"address"`
	Host      string `json:"host"`
	VendorID  string `json:"vendor_id"`
	ProductID string `json:"product_id"`
	Class     string `json:"class,omitempty"`
	// Alias is the device_spec alias instance specs request it by; empty
	// for a one-time-use device an instance named directly in pci_devices.
	Alias string `json:"alias"`

	// Total is 1 (one whole device); Reserved is total while burned;
	// Used is 1 while an instance holds it. Capacity is total - reserved.
	Total    int      `json:"total"`
	Reserved int      `json:"reserved"`
	Used     int      `json:"used"`
	Traits   []string `json:"traits"`

	OneTimeUse     bool `json:"one_time_use"`
	LiveMigratable bool `json:"live_migratable"`
	// Present is false for a device the last sync did not find in sysfs
	// or the device spec no longer matches (or never matched: a device
	// named directly in pci_devices): it is kept (it may be burned or in
	// use) but never claimed by an alias.
	Present bool `json:"present"`

	// Consumer is the UUID of the instance using it; ConsumerName its
	// name, kept after release (the instance that used it last).
	Consumer     string `json:"consumer,omitempty"`
	ConsumerName string `json:"consumer_name,omitempty"`

	// NeedsCleaning: reserved == total and used == 0, by the counters
	// alone (a device burned while one-time-use, whatever its traits now).
	NeedsCleaning bool `json:"needs_cleaning"`

	BurnedAt   *time.Time `json:"burned_at,omitempty"`
	ReleasedAt *time.Time `json:"released_at,omitempty"`
	CleanedAt  *time.Time `json:"cleaned_at,omitempty"`
	// LastCleanupHook is how the cleanup hook run for the last release
	// ended.
	LastCleanupHook *HookResult `json:"last_cleanup_hook,omitempty"`

	// Generation is the record's version: it grows by one on every
	// change (optimistic concurrency, as placement's provider
	// generation).
	Generation int64 `json:"generation"`
}

// HookResult is the outcome of one cleanup hook run.
type HookResult struct {
	// Outcome is ok, failed (non-zero exit), timeout, garbage (its output
	// was not a JSON object), error (it could not be run) or skipped (too
	// many hooks running).
	Outcome string    `json:"outcome"`
	Message string    `json:"message,omitempty"`
	At      time.Time `json:"at"`
}

// DeviceList is GET /v1/devices.
type DeviceList struct {
	Devices []Device `json:"devices"`
}
