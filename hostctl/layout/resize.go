package layout

import (
	"context"
	"fmt"
	"slices"

	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/store"
)

// Resize is old laid out anew for the registered flavor flavorName (its
// flavor disks, their encryption), with that flavor; refused when the
// flavors' or the image's encryption settings forbid the resize or a
// disk would shrink. old is not changed.
func (l *Layout) Resize(ctx context.Context, old *model.Instance, flavorName string) (*model.Instance, *flavors.Flavor, error) {
	if l.Flavors == nil {
		return nil, nil, ErrNoRecords
	}
	newF, err := l.Flavors.Get(ctx, flavorName)
	if err != nil {
		return nil, nil, err
	}
	if old.Flavor == newF.Name {
		return nil, nil, fmt.Errorf("%w: the instance has flavor %s already", store.ErrConflict, newF.Name)
	}
	oldF, err := l.FlavorOf(ctx, old.Flavor)
	if err != nil {
		return nil, nil, err
	}
	if oldF == nil || !LaidOut(old) {
		// Its disks were not laid out by a flavor: there is nothing to
		// grow them from.
		return nil, nil, fmt.Errorf("%w: the instance was not made from a registered flavor (flavor %q; its disks come from its spec: change them with instance apply)", part.ErrState, old.Flavor)
	}
	img, err := l.ImageOf(ctx, old.Image)
	if err != nil {
		return nil, nil, err
	}
	if err := l.Encryption.SameForResize(old, oldF, &newF, img); err != nil {
		return nil, nil, err
	}
	in := old.Clone()
	in.Flavor, in.VCPUs, in.MemoryMiB = newF.Name, 0, 0
	for i := range in.Disks {
		if in.Disks[i].Kind != "" {
			in.Disks[i].Size = ""
		}
	}
	if err := flavorDisks(in, &newF, img); err != nil {
		return nil, nil, err
	}
	if err := neverShrink(old, in, &newF, img); err != nil {
		return nil, nil, err
	}
	if err := l.Encryption.Decide(in, &newF, img); err != nil {
		return nil, nil, err
	}
	return in, &newF, nil
}

// Rebuild is old with its root disk from image newImg; refused when the
// flavor's or the images' encryption settings forbid the rebuild or the
// image does not fit the flavor's root disk. old is not changed.
func (l *Layout) Rebuild(ctx context.Context, old *model.Instance, newImg *images.Image) (*model.Instance, error) {
	f, err := l.FlavorOf(ctx, old.Flavor)
	if err != nil {
		return nil, err
	}
	if !LaidOut(old) {
		f = nil // its flavor is a label (registered later, if at all)
	}
	oldImg, err := l.ImageOf(ctx, old.Image)
	if err != nil {
		return nil, err
	}
	if err := l.Encryption.SameForRebuild(old, f, oldImg, newImg); err != nil {
		return nil, err
	}
	if RootDisk(old) < 0 {
		return nil, fmt.Errorf("%w: the instance has no disk made from an image", part.ErrState)
	}
	if f != nil && f.Disk > 0 && newImg.VirtualSize > int64(f.Disk)<<30 {
		return nil, &model.SpecError{Errors: []model.FieldError{{Field: "image", Value: newImg.Name,
			Rule: fmt.Sprintf("its %d bytes do not fit flavor %s's %d GiB root disk", newImg.VirtualSize, f.Name, f.Disk)}}, Of: "rebuild request"}
	}
	in := old.Clone()
	in.Image = newImg.Name
	if err := l.Encryption.Decide(in, f, newImg); err != nil {
		return nil, err
	}
	return in, nil
}

// RootDisk is the index of the disk made from the image: the one of kind
// root, else (no kinds) the first disk of an instance with an image; -1
// when there is none.
func RootDisk(in *model.Instance) int {
	if i := slices.IndexFunc(in.Disks, func(d model.Disk) bool { return d.Kind == model.DiskKindRoot }); i >= 0 {
		return i
	}
	if in.Image != "" && len(in.Disks) > 0 && !HasKinds(in) {
		return 0
	}
	return -1
}

// neverShrink refuses a resize that would shrink or remove a flavor
// disk, naming the disk and both sizes.
func neverShrink(old, in *model.Instance, f *flavors.Flavor, img *images.Image) error {
	imageSize := int64(-1)
	if img != nil {
		imageSize = img.VirtualSize
	}
	bytesOf := func(d model.Disk) int64 {
		if n, ok := DiskBytes(d.Size); ok {
			return n
		}
		return imageSize // "": the image's size
	}
	for _, o := range old.Disks {
		if o.Kind == "" {
			continue
		}
		j := slices.IndexFunc(in.Disks, func(d model.Disk) bool { return d.Kind == o.Kind })
		if j < 0 {
			return fmt.Errorf("%w: flavor %s has no %s disk, and the instance's %s (%s) would go: a resize never removes a disk", store.ErrConflict, f.Name, o.Kind, o.Name, orImage(o.Size))
		}
		before, after := bytesOf(o), bytesOf(in.Disks[j])
		if before >= 0 && after >= 0 && after < before {
			return fmt.Errorf("%w: flavor %s's %s disk (%s) is smaller than the instance's %s (%s): disks are never shrunk", store.ErrConflict, f.Name, o.Kind, orImage(in.Disks[j].Size), o.Name, orImage(o.Size))
		}
	}
	return nil
}
