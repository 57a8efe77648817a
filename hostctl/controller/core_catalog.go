package controller

import (
	"context"

	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/internal/model"
)

// What hostctl/catalog (the flavor registry, the image catalog and the
// secrets of the admin API) needs of the core: the registries the core
// lays instances out from, which instances use a flavor or an image, and
// the one rule for deleting a secret (hostctl/parts/disks, secretuse.go).

// FlavorRegistry is the flavor registry; nil when the store keeps no
// records.
func (c *Controller) FlavorRegistry() *flavors.Registry { return c.flavors }

// ImageDir is this host's image directory.
func (c *Controller) ImageDir() *images.Dir { return c.imageDir }

// FlavorUsers names the instances (on any host sharing the store) that
// name flavor.
func (c *Controller) FlavorUsers(ctx context.Context, flavor string) ([]string, error) {
	return c.instancesUsing(ctx, true, func(in *model.Instance) bool { return in.Flavor == flavor })
}

// ImageUsers names the instances of this host (the image directory is
// this host's) that name image, and the shelved ones whose root disk it
// is.
func (c *Controller) ImageUsers(ctx context.Context, image string) ([]string, error) {
	using, err := c.instancesUsing(ctx, false, func(in *model.Instance) bool { return in.Image == image })
	if err != nil {
		return nil, err
	}
	shelved, err := c.states().ImageUsers(ctx, image) // core_vmstate.go
	return append(using, shelved...), err
}

// ReleaseSecret deletes the key-manager secret id under the one rule
// (the disks part's): refused with keys.ErrInUse naming what still names it,
// apart from image, an image being deleted ("": none).
func (c *Controller) ReleaseSecret(ctx context.Context, id, image string) error {
	return c.disks.ReleaseSecret(ctx, id, image)
}

// LockSecret holds the lock of secret id until unlock: a step about to
// make something name the secret (an image import) holds it, so the
// secret is not deleted meanwhile.
func (c *Controller) LockSecret(id string) (unlock func()) { return c.secretLocks.Lock(id) }

// instancesUsing names the instances (this host's, or every host's) for
// which use is true.
func (c *Controller) instancesUsing(ctx context.Context, allHosts bool, use func(*model.Instance) bool) ([]string, error) {
	recs, err := c.store.Instances(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, rec := range recs {
		if !allHosts && !c.owns(rec) {
			continue
		}
		in, err := decodeSpec(rec)
		if err != nil {
			return nil, err
		}
		if use(in) {
			out = append(out, rec.Name)
		}
	}
	return out, nil
}
