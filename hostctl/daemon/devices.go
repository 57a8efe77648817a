package daemon

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/vmeta/vmeta/hostctl/devices"
	"github.com/vmeta/vmeta/internal/store"
)

// DevicesConfig is the passthrough device inventory's part of the
// configuration.
type DevicesConfig struct {
	// SpecFile is the device spec (YAML or JSON); empty: no devices are
	// offered (burned devices of an earlier spec stay listed).
	SpecFile string
	// SysfsRoot is where sysfs is mounted ("/sys").
	SysfsRoot string
	// CleanupHook is run with the device record on stdin when a burned
	// device is released; CleanupHookTimeout bounds it.
	CleanupHook        string
	CleanupHookTimeout time.Duration
	// SyncInterval is how often the spec file and sysfs are read again
	// and the inventory synced (healing devices marked one-time-use while
	// allocated); 0: only at start.
	SyncInterval time.Duration
}

// DefaultDeviceSyncInterval is the default of --device-sync-interval.
const DefaultDeviceSyncInterval = time.Minute

// AddFlags registers the device flags.
func (c *DevicesConfig) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.SpecFile, "device-spec", "", "device spec file (YAML or JSON): which PCI devices instances may request by alias (pci_aliases), and which are one-time-use")
	fs.StringVar(&c.SysfsRoot, "sysfs-root", "/sys", "where sysfs is mounted: the PCI devices are read from SYSFS-ROOT/bus/pci/devices")
	fs.StringVar(&c.CleanupHook, "cleanup-hook", "", "command (run by /bin/sh -c) started when a burned one-time-use device is released, with the device record as JSON on stdin; it never blocks hostctl and is never retried")
	fs.DurationVar(&c.CleanupHookTimeout, "cleanup-hook-timeout", devices.DefaultHookTimeout, "how long a cleanup hook may run before it is killed (and reported as timeout)")
	fs.DurationVar(&c.SyncInterval, "device-sync-interval", DefaultDeviceSyncInterval, "how often the device spec and sysfs are read again and the inventory synced: a device marked one_time_use while in use is burned then (0: only at start)")
}

// syncDevices re-reads the device spec and sysfs and syncs the inventory
// every cfg.SyncInterval until ctx is done. A spec that no longer parses
// is logged and the one in force kept.
func syncDevices(ctx context.Context, cfg DevicesConfig, inv *devices.Inventory, log *slog.Logger) {
	if cfg.SyncInterval <= 0 || cfg.SpecFile == "" {
		return
	}
	t := time.NewTicker(cfg.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		spec, err := devices.LoadSpec(cfg.SpecFile)
		if err != nil {
			log.Error("device spec not reloaded; the one read before stays in force", "err", err)
			continue
		}
		found, err := devices.Discover(cfg.SysfsRoot)
		if err != nil {
			log.Error("device sync: sysfs", "err", err)
			continue
		}
		inv.SetSpec(spec)
		if _, err := inv.Sync(ctx, found); err != nil && ctx.Err() == nil {
			log.Error("device sync", "err", err)
		}
	}
}

// openDevices builds the host's device inventory from the device spec
// and the cleanup hook the validation read: reads sysfs, syncs the inventory (healing devices marked one-time-use
// while allocated) and releases the devices of instances this host does
// not have (an apply killed between its claim and its store write): they
// stay burned and need cleaning.
func openDevices(ctx context.Context, cfg DevicesConfig, spec *devices.Spec, hook *devices.Hook, st store.Store, host string, audit devices.Emitter, log *slog.Logger) (*devices.Inventory, error) {
	ds, ok := st.(devices.Store)
	if !ok {
		return nil, fmt.Errorf("device inventory: the store %T has no record groups", st)
	}
	inv, err := devices.New(ds, devices.Options{Host: host, Spec: spec, Hook: hook, Logger: log, Events: audit})
	if err != nil {
		return nil, err
	}
	var found []devices.Found
	if spec != nil && len(spec.Entries) > 0 {
		if found, err = devices.Discover(cfg.SysfsRoot); err != nil {
			return nil, fmt.Errorf("--sysfs-root: %w", err)
		}
	}
	list, err := inv.Sync(ctx, found)
	if err != nil {
		return nil, err
	}
	recs, err := st.Instances(ctx)
	if err != nil {
		return nil, fmt.Errorf("device inventory: %w", err)
	}
	live := map[string]bool{}
	for _, r := range recs {
		if r.Host == host || r.Host == "" {
			live[r.UUID] = true
		}
	}
	if _, err := inv.ReleaseOrphans(ctx, func(uuid string) bool { return live[uuid] }); err != nil {
		return nil, err
	}
	log.Info("device inventory", "devices", len(list), "spec", cfg.SpecFile)
	return inv, nil
}
