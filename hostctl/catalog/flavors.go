package catalog

import (
	"context"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/flavors"
)

// CreateFlavor adds a flavor.
func (c *Catalog) CreateFlavor(ctx context.Context, f flavors.Flavor) (flavors.Flavor, error) {
	reg := c.flavors
	if reg == nil {
		return flavors.Flavor{}, errNoRecords
	}
	out, err := reg.Create(ctx, f)
	if err == nil {
		c.emit(ctx, StreamFlavors, "flavor.created", types.Flavor(out))
	}
	return out, err
}

// Flavor returns a flavor by name.
func (c *Catalog) Flavor(ctx context.Context, name string) (flavors.Flavor, error) {
	reg := c.flavors
	if reg == nil {
		return flavors.Flavor{}, errNoRecords
	}
	return reg.Get(ctx, name)
}

// Flavors lists the flavors.
func (c *Catalog) Flavors(ctx context.Context) ([]flavors.Flavor, error) {
	reg := c.flavors
	if reg == nil {
		return nil, errNoRecords
	}
	return reg.List(ctx)
}

// DeleteFlavor deletes a flavor no instance (on any host sharing the
// store) uses.
func (c *Catalog) DeleteFlavor(ctx context.Context, name string) error {
	reg := c.flavors
	if reg == nil {
		return errNoRecords
	}
	err := reg.Delete(ctx, name, func(ctx context.Context) ([]string, error) {
		return c.users.FlavorUsers(ctx, name)
	})
	if err == nil {
		c.emit(ctx, StreamFlavors, "flavor.deleted", map[string]string{"name": name})
	}
	return err
}
