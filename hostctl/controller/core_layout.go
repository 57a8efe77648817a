package controller

import (
	"context"

	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/layout"
	"github.com/vmeta/vmeta/internal/model"
)

// The layout of an instance from its spec, flavor and image
// (hostctl/layout) as the core uses it: the flavor and image an instance
// names, its disks as an apply lays them out with the encryption
// decision, the encryption of a disk attached later. hostctl/ops resizes
// and rebuilds with the same layout.

// Layouts lays instances out (*layout.Layout).
type Layouts interface {
	FlavorOf(ctx context.Context, name string) (*flavors.Flavor, error)
	ImageOf(ctx context.Context, name string) (*images.Image, error)
	Apply(ctx context.Context, in, old *model.Instance) (warnings []string, err error)
	EncryptAttached(ctx context.Context, in *model.Instance, d *model.Disk) error
	Resize(ctx context.Context, old *model.Instance, flavor string) (*model.Instance, *flavors.Flavor, error)
	Rebuild(ctx context.Context, old *model.Instance, img *images.Image) (*model.Instance, error)
}

// DefaultEncryptionHost is the host's encryption formats and default
// format when Options.Encryption names none.
var DefaultEncryptionHost = layout.DefaultHost

// Layouts is the layout of this core's instances: over its flavor
// registry, its image directory and this host's encryption formats.
func (c *Controller) Layouts() Layouts {
	l := &layout.Layout{Images: c.imageDir, Encryption: layout.Policy{Host: c.encHost}}
	if c.flavors != nil {
		l.Flavors = c.flavors
	}
	return l
}

func (c *Controller) flavorOf(ctx context.Context, name string) (*flavors.Flavor, error) {
	return c.Layouts().FlavorOf(ctx, name)
}

func (c *Controller) imageOf(ctx context.Context, name string) (*images.Image, error) {
	return c.Layouts().ImageOf(ctx, name)
}

func hasKinds(in *model.Instance) bool { return layout.HasKinds(in) }
