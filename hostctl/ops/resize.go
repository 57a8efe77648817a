package ops

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/layout"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// Resize gives a stopped instance another flavor: its vCPUs and memory,
// and its flavor disks grown to the new sizes (a root or ephemeral disk
// grows in place, the swap disk is made anew; a flavor adding an
// ephemeral or swap disk adds it). Disks are never shrunk or removed: a
// flavor with a smaller disk is refused (409), as is one whose ephemeral
// encryption settings differ from the current flavor's (the disks would
// have to be converted in place), naming both flavors. A failure undoes
// what was done.
func (o *resizer) Resize(ctx context.Context, name, flavorName string) (_ *controller.Instance, err error) {
	defer o.frame.Observe("resize", time.Now(), &err)
	defer o.frame.LockInstance(name)()
	rec, old, err := instance(ctx, o.frame, "", part.Resize, name, stopped)
	if err != nil {
		return nil, err
	}
	in, newF, err := o.layouts.Resize(ctx, old, flavorName)
	if err != nil {
		return nil, fmt.Errorf("resize %s: %w", name, err)
	}

	r := revert.New(o.log, "resize "+name)
	defer r.Fail(&err)
	var aside []string
	for _, d := range in.Disks {
		j := slices.IndexFunc(old.Disks, func(o model.Disk) bool { return o.Name == d.Name })
		if j < 0 || old.Disks[j].Size == d.Size {
			continue
		}
		p := diskFile(o.files, in, d)
		if !fileExists(p) {
			continue // no hypervisor: there are no disk files
		}
		if d.Kind == model.DiskKindSwap {
			// Swap holds nothing worth keeping: made anew over the new
			// size's template by the apply below.
			a, err := setAside(r, p)
			if err != nil {
				return nil, fmt.Errorf("resize %s: %w", name, err)
			}
			aside = append(aside, a)
			continue
		}
		before, err := o.images.ImageDir().VirtualSize(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("resize %s: %w", name, err)
		}
		want, ok := layout.DiskBytes(d.Size)
		if !ok {
			continue // the image's size: unchanged
		}
		if err := o.disks.ResizeDisk(ctx, old, d.Name, p, want, false); err != nil {
			return nil, fmt.Errorf("resize %s: disk %s: %w", name, d.Name, err)
		}
		r.Add("shrink disk "+p+" back", func(ctx context.Context) error { return o.disks.ResizeDisk(ctx, old, d.Name, p, before, true) })
	}
	inst, err := o.apply.ApplyFor(ctx, part.Resize, in, withSizesOf(old, in), rec.Revision)
	if err != nil {
		return nil, fmt.Errorf("resize %s: %w", name, err)
	}
	r.Success()
	for _, a := range aside {
		_ = removeFile(a)
	}
	o.log.Info("instance resized", "name", name, "flavor", newF.Name, "from", old.Flavor)
	o.frame.Emit(ctx, controller.StreamInstances, "instance.resized", map[string]string{"name": name, "uuid": old.UUID, "from": old.Flavor, "to": newF.Name})
	return inst, nil
}

// withSizesOf is old with the disk sizes of in, for an apply that has
// already grown the disks (the apply itself does not resize).
func withSizesOf(old, in *model.Instance) *model.Instance {
	o := old.Clone()
	for i := range o.Disks {
		if j := slices.IndexFunc(in.Disks, func(d model.Disk) bool { return d.Name == o.Disks[i].Name }); j >= 0 {
			o.Disks[i].Size = in.Disks[j].Size
		}
	}
	return o
}
