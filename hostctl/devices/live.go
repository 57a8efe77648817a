package devices

import "context"

// LiveMigratable reports whether the device at addr is flagged
// live_migratable in the device spec (the passthrough part refuses a live
// migration of an instance holding any device that is not; the
// one-time-use specification: "Live migrate: if the device is already
// live migratable, then it will be allowed").
func (inv *Inventory) LiveMigratable(ctx context.Context, addr string) (bool, error) {
	d, err := inv.Show(ctx, addr)
	if err != nil {
		return false, err
	}
	return d.LiveMigratable, nil
}
