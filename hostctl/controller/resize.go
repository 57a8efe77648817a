package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/vmeta/vmeta/hostctl/encryption/policy"
	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// Resize gives a stopped instance another flavor: its vCPUs and memory,
// and its flavor disks grown to the new sizes (a root or ephemeral disk
// grows in place, the swap disk is made anew; a flavor adding an
// ephemeral or swap disk adds it). Disks are never shrunk or removed: a
// flavor with a smaller disk is refused (409), as is one whose ephemeral
// encryption settings differ from the current flavor's (the disks would
// have to be converted in place), naming both flavors. A failure undoes
// what was done.
func (c *Controller) Resize(ctx context.Context, name, flavorName string) (_ *Instance, err error) {
	defer c.observe("resize", time.Now(), &err)
	defer c.locks.Lock(name)()
	rec, old, err := c.stoppedInstance(ctx, "resize", name)
	if err != nil {
		return nil, err
	}
	if c.flavors == nil {
		return nil, fmt.Errorf("resize %s: %w", name, errNoRecords)
	}
	newF, err := c.flavors.Get(ctx, flavorName)
	if err != nil {
		return nil, fmt.Errorf("resize %s: %w", name, err)
	}
	if old.Flavor == newF.Name {
		return nil, fmt.Errorf("resize %s: %w: the instance has flavor %s already", name, store.ErrConflict, newF.Name)
	}
	oldF, err := c.flavorOf(ctx, old.Flavor)
	if err != nil {
		return nil, fmt.Errorf("resize %s: %w", name, err)
	}
	if oldF == nil || !laidOut(old) {
		// Its disks were not laid out by a flavor: there is nothing to
		// grow them from.
		return nil, fmt.Errorf("resize %s: %w: the instance was not made from a registered flavor (flavor %q; its disks come from its spec: change them with instance apply)", name, ErrState, old.Flavor)
	}
	img, err := c.imageOf(ctx, old.Image)
	if err != nil {
		return nil, fmt.Errorf("resize %s: %w", name, err)
	}
	oldS, err := flavorSettings(oldF, old.Flavor)
	if err != nil {
		return nil, fmt.Errorf("resize %s: %w", name, err)
	}
	newS, err := flavorSettings(&newF, newF.Name)
	if err != nil {
		return nil, fmt.Errorf("resize %s: %w", name, err)
	}
	imgS, err := imageSettings(img, old.Image)
	if err != nil {
		return nil, fmt.Errorf("resize %s: %w", name, err)
	}
	if err := policy.SameForResize(oldS, newS, imgS, c.encHost); err != nil {
		return nil, fmt.Errorf("resize %s: %w", name, err)
	}

	in := clone(old)
	in.Flavor, in.VCPUs, in.MemoryMiB = newF.Name, 0, 0
	for i := range in.Disks {
		if in.Disks[i].Kind != "" {
			in.Disks[i].Size = ""
		}
	}
	if err := c.flavorDisks(in, &newF, img); err != nil {
		return nil, fmt.Errorf("resize %s: %w", name, err)
	}
	if err := neverShrink(old, in, &newF, img); err != nil {
		return nil, fmt.Errorf("resize %s: %w", name, err)
	}
	if err := c.decideEncryption(in, &newF, img); err != nil {
		return nil, fmt.Errorf("resize %s: %w", name, err)
	}

	r := revert.New(c.log, "resize "+name)
	defer r.Fail(&err)
	var aside []string
	for _, d := range in.Disks {
		j := slices.IndexFunc(old.Disks, func(o model.Disk) bool { return o.Name == d.Name })
		if j < 0 || old.Disks[j].Size == d.Size {
			continue
		}
		p := filepath.Join(c.instanceDir(name), diskFileOf(d))
		if !fileExists(p) {
			continue // no hypervisor: there are no disk files
		}
		if d.Kind == model.DiskKindSwap {
			// Swap holds nothing worth keeping: made anew over the new
			// size's template by the apply below.
			a, err := c.setAside(r, p)
			if err != nil {
				return nil, fmt.Errorf("resize %s: %w", name, err)
			}
			aside = append(aside, a)
			continue
		}
		before, err := c.imageDir.VirtualSize(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("resize %s: %w", name, err)
		}
		want, ok := sizeBytes(d.Size)
		if !ok {
			continue // the image's size: unchanged
		}
		if err := c.resizeDisk(ctx, old, d.Name, p, want, false); err != nil {
			return nil, fmt.Errorf("resize %s: disk %s: %w", name, d.Name, err)
		}
		r.Add("shrink disk "+p+" back", func(ctx context.Context) error { return c.resizeDisk(ctx, old, d.Name, p, before, true) })
	}
	inst, err := c.drv.apply(ctx, part.Resize, in, withSizesOf(old, in), rec.Revision)
	if err != nil {
		return nil, fmt.Errorf("resize %s: %w", name, err)
	}
	r.Success()
	for _, a := range aside {
		_ = removeFile(a)
	}
	c.log.Info("instance resized", "name", name, "flavor", newF.Name, "from", old.Flavor)
	c.emit(ctx, StreamInstances, "instance.resized", map[string]string{"name": name, "uuid": old.UUID, "from": old.Flavor, "to": newF.Name})
	return inst, nil
}

// Rebuild makes a stopped instance's root disk anew from another image;
// its other disks, tags and settings stay. An image whose ephemeral
// encryption settings differ from the current image's is refused (409,
// naming both images): the disks' secrets and formats stay the
// instance's. A failure puts the old root disk back.
func (c *Controller) Rebuild(ctx context.Context, name, imageName string) (_ *Instance, err error) {
	defer c.observe("rebuild", time.Now(), &err)
	defer c.locks.Lock(name)()
	rec, old, err := c.stoppedInstance(ctx, "rebuild", name)
	if err != nil {
		return nil, err
	}
	defer c.imageDir.Use(imageName)()
	newImg, err := c.imageDir.Get(ctx, imageName)
	if err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", name, err)
	}
	f, err := c.flavorOf(ctx, old.Flavor)
	if err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", name, err)
	}
	if !laidOut(old) {
		f = nil // its flavor is a label (registered later, if at all)
	}
	oldImg, err := c.imageOf(ctx, old.Image)
	if err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", name, err)
	}
	fS, err := flavorSettings(f, old.Flavor)
	if err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", name, err)
	}
	oldS, err := imageSettings(oldImg, old.Image)
	if err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", name, err)
	}
	newS, err := imageSettings(&newImg, newImg.Name)
	if err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", name, err)
	}
	if err := policy.SameForRebuild(fS, oldS, newS, c.encHost); err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", name, err)
	}
	root := rootDisk(old)
	if root < 0 {
		return nil, fmt.Errorf("rebuild %s: %w: the instance has no disk made from an image", name, ErrState)
	}
	if f != nil && f.Disk > 0 && newImg.VirtualSize > int64(f.Disk)<<30 {
		return nil, fmt.Errorf("rebuild %s: %w", name, &model.SpecError{Errors: []model.FieldError{{Field: "image", Value: newImg.Name,
			Rule: fmt.Sprintf("its %d bytes do not fit flavor %s's %d GiB root disk", newImg.VirtualSize, f.Name, f.Disk)}}, Of: "rebuild request"})
	}
	in := clone(old)
	in.Image = newImg.Name
	if err := c.decideEncryption(in, f, &newImg); err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", name, err)
	}

	r := revert.New(c.log, "rebuild "+name)
	defer r.Fail(&err)
	var aside string
	if p := filepath.Join(c.instanceDir(name), diskFileOf(old.Disks[root])); fileExists(p) {
		if aside, err = c.setAside(r, p); err != nil {
			return nil, fmt.Errorf("rebuild %s: %w", name, err)
		}
	}
	inst, err := c.drv.apply(ctx, part.Rebuild, in, old, rec.Revision)
	if err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", name, err)
	}
	r.Success()
	if aside != "" {
		_ = removeFile(aside)
	}
	c.log.Info("instance rebuilt", "name", name, "image", newImg.Name, "from", old.Image)
	c.emit(ctx, StreamInstances, "instance.rebuilt", map[string]string{"name": name, "uuid": old.UUID, "from": old.Image, "to": newImg.Name})
	return inst, nil
}

// stoppedInstance returns the record and spec of this host's instance
// name for op, refusing (ErrState) one whose domain is not shut off.
func (c *Controller) stoppedInstance(ctx context.Context, op, name string) (store.Instance, *model.Instance, error) {
	rec, err := c.ownRecord(ctx, op, name)
	if err != nil {
		return store.Instance{}, nil, err
	}
	if err := c.refuseVMState(ctx, op, rec); err != nil { // vmstate.go
		return store.Instance{}, nil, err
	}
	if err := c.checkRecordParts(ctx, part.Op(op), rec); err != nil { // parts.go (shares refuse a resize or rebuild)
		return store.Instance{}, nil, err
	}
	old, err := decodeSpec(rec)
	if err != nil {
		return store.Instance{}, nil, err
	}
	if c.domains != nil {
		cur, err := c.requireDomain(ctx, name, rec.UUID)
		if err != nil {
			return store.Instance{}, nil, fmt.Errorf("%s %s: %w", op, name, err)
		}
		if cur.running {
			return store.Instance{}, nil, fmt.Errorf("%s %s: %w: the instance is %s; stop it first", op, name, ErrState, cur.state)
		}
	}
	return rec, old, nil
}

// setAside renames a disk file out of the way of its replacement and
// registers putting it back.
func (c *Controller) setAside(r *revert.Reverter, p string) (string, error) {
	a := p + ".old"
	if err := os.Rename(p, a); err != nil {
		return "", err
	}
	r.Add("put "+p+" back", func(context.Context) error {
		if err := removeFile(p); err != nil {
			return err
		}
		return os.Rename(a, p)
	})
	return a, nil
}

// rootDisk is the index of the disk made from the image: the one of kind
// root, else (no kinds) the first disk of an instance with an image; -1
// when there is none.
func rootDisk(in *model.Instance) int {
	if i := slices.IndexFunc(in.Disks, func(d model.Disk) bool { return d.Kind == model.DiskKindRoot }); i >= 0 {
		return i
	}
	if in.Image != "" && len(in.Disks) > 0 && !slices.ContainsFunc(in.Disks, func(d model.Disk) bool { return d.Kind != "" }) {
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
		if n, ok := sizeBytes(d.Size); ok {
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

// withSizesOf is old with the disk sizes of in, for an apply that has
// already grown the disks (the apply itself does not resize).
func withSizesOf(old, in *model.Instance) *model.Instance {
	o := clone(old)
	for i := range o.Disks {
		if j := slices.IndexFunc(in.Disks, func(d model.Disk) bool { return d.Name == o.Disks[i].Name }); j >= 0 {
			o.Disks[i].Size = in.Disks[j].Size
		}
	}
	return o
}
