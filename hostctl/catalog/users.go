package catalog

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// StoreUsers names the users of flavors and images from the store's
// instance records (Instances): for a flavor the instances of every
// host, for an image those of this host (Host; "": hosts are not
// tracked, every record is this host's) and the shelved ones whose root
// disk the image is (States, the states part: hostctl/parts/vmstate;
// nil: none).
type StoreUsers struct {
	Instances interface {
		Instances(ctx context.Context) ([]store.Instance, error)
	}
	Host   string
	States interface {
		ImageUsers(ctx context.Context, name string) ([]string, error)
	}
}

// FlavorUsers names the instances (on any host sharing the store) that
// name flavor.
func (u StoreUsers) FlavorUsers(ctx context.Context, flavor string) ([]string, error) {
	return u.using(ctx, true, func(in *model.Instance) bool { return in.Flavor == flavor })
}

// ImageUsers names the instances of this host that name image, and the
// shelved ones whose root disk it is.
func (u StoreUsers) ImageUsers(ctx context.Context, image string) ([]string, error) {
	using, err := u.using(ctx, false, func(in *model.Instance) bool { return in.Image == image })
	if err != nil || u.States == nil {
		return using, err
	}
	shelved, err := u.States.ImageUsers(ctx, image)
	return append(using, shelved...), err
}

// using names the instances (this host's, or every host's) for which use
// is true.
func (u StoreUsers) using(ctx context.Context, allHosts bool, use func(*model.Instance) bool) ([]string, error) {
	recs, err := u.Instances.Instances(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, rec := range recs {
		if !allHosts && rec.Host != "" && u.Host != "" && rec.Host != u.Host {
			continue // another host's (the controller's ownership rule)
		}
		var in model.Instance
		if err := json.Unmarshal(rec.Spec, &in); err != nil {
			return nil, fmt.Errorf("instance %s: decode stored spec: %w", rec.Name, err)
		}
		if use(&in) {
			out = append(out, rec.Name)
		}
	}
	return out, nil
}
