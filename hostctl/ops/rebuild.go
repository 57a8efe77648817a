package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/layout"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/revert"
)

// Rebuild makes a stopped instance's root disk anew from another image;
// its other disks, tags and settings stay. An image whose ephemeral
// encryption settings differ from the current image's is refused (409,
// naming both images): the disks' secrets and formats stay the
// instance's. A failure puts the old root disk back.
func (o *rebuilder) Rebuild(ctx context.Context, name, imageName string) (_ *controller.Instance, err error) {
	defer o.frame.Observe("rebuild", time.Now(), &err)
	defer o.frame.LockInstance(name)()
	rec, old, err := instance(ctx, o.frame, "", part.Rebuild, name, stopped)
	if err != nil {
		return nil, err
	}
	dir := o.images.ImageDir()
	defer dir.Use(imageName)()
	newImg, err := dir.Get(ctx, imageName)
	if err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", name, err)
	}
	in, err := o.layouts.Rebuild(ctx, old, &newImg)
	if err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", name, err)
	}

	r := revert.New(o.log, "rebuild "+name)
	defer r.Fail(&err)
	var aside string
	if p := diskFile(o.files, old, old.Disks[layout.RootDisk(old)]); fileExists(p) {
		if aside, err = setAside(r, p); err != nil {
			return nil, fmt.Errorf("rebuild %s: %w", name, err)
		}
	}
	inst, err := o.apply.ApplyFor(ctx, part.Rebuild, in, old, rec.Revision)
	if err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", name, err)
	}
	r.Success()
	if aside != "" {
		_ = removeFile(aside)
	}
	o.log.Info("instance rebuilt", "name", name, "image", newImg.Name, "from", old.Image)
	o.frame.Emit(ctx, controller.StreamInstances, "instance.rebuilt", map[string]string{"name": name, "uuid": old.UUID, "from": old.Image, "to": newImg.Name})
	return inst, nil
}
