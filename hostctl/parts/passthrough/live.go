package passthrough

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
)

// LiveInventory is an inventory that knows which devices are flagged
// live_migratable (hostctl/devices' Inventory).
type LiveInventory interface {
	LiveMigratable(ctx context.Context, addr string) (bool, error)
}

// checkLive refuses a live migration of in while it holds a passthrough
// device that is not live_migratable (one-time-use specification: live
// migrate only of devices already live migratable), or any device the
// inventory cannot vouch for.
func (p *Part) checkLive(ctx context.Context, in *model.Instance) error {
	li, _ := p.inv.(LiveInventory)
	for _, d := range in.PCIDevices {
		if li == nil {
			return fmt.Errorf("%w: live migration of %s: passthrough device %s: this host has no device inventory to say it is live_migratable", part.ErrState, in.Name, d.Address)
		}
		ok, err := li.LiveMigratable(ctx, d.Address)
		if err != nil {
			return fmt.Errorf("%w: live migration of %s: passthrough device %s: %w", part.ErrState, in.Name, d.Address, err)
		}
		if !ok {
			return fmt.Errorf("%w: live migration of %s: passthrough device %s is not live_migratable (device spec); move it cold (`hostctl instance migrate %s --to HOST`)", part.ErrState, in.Name, d.Address, in.Name)
		}
	}
	return nil
}
