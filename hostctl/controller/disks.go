package controller

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// Host files of an instance, under <data dir>/instances/<name>/:
//
//	disk                  a flavor's root disk, over the image (Nova's name)
//	disk.eph0, disk.swap  a flavor's ephemeral and swap disks, over blank templates in instances/_base
//	disk-<target>.qcow2   each other disk (hostctl/images; over the spec's image for disks[0])
//	disk.config           the config drive (ISO 9660 or vfat)
//	console.log           the serial console (written by virtlogd)
const (
	driveFile   = "disk.config"
	consoleFile = "console.log"
)

func diskFile(target string) string { return "disk-" + target + "." + images.DiskFormat }

// diskFileOf is the file of a disk: Nova's names for a flavor's disks
// (every one qcow2), diskFile for the others.
func diskFileOf(d model.Disk) string {
	switch d.Kind {
	case model.DiskKindRoot:
		return "disk"
	case model.DiskKindEphemeral:
		return "disk.eph0"
	case model.DiskKindSwap:
		return "disk.swap"
	}
	return diskFile(d.Name)
}

// host is where the instance's files live, for virt.BuildDomain.
func (c *Controller) host(in *model.Instance) virt.Host {
	rel := filepath.Join("instances", in.Name)
	h := virt.Host{
		DataDir:   c.dataDir,
		Disks:     make(map[string]virt.DiskSource, len(in.Disks)),
		SerialLog: filepath.Join(rel, consoleFile),
	}
	if in.WantsConfigDrive() { // config_drive: false: no cdrom
		h.ConfigDrive = filepath.Join(rel, driveFile)
	}
	for _, d := range in.Disks {
		h.Disks[d.Name] = virt.DiskSource{Path: filepath.Join(rel, diskFileOf(d)), Format: images.DiskFormat}
	}
	return h
}

// Images makes the disk images of instances (hostctl/images).
type Images interface {
	// Lookup finds a base image by name, with its format.
	Lookup(ctx context.Context, name string) (images.Base, error)
	// Create creates a disk image; a failure may leave a partial file.
	Create(ctx context.Context, d images.Disk) error
}

var _ Images = (*images.Dir)(nil)

// diskPlan is a disk image to create.
type diskPlan struct {
	target string
	images.Disk
	// encrypt: the spec requests the disk encrypted (encryption.go).
	encrypt bool
	// image is the catalog image Base is (the root disk's), for an
	// encrypted image's backing secret (backing.go).
	image string
}

// planDisks decides how each disk of in that has no image file yet is
// created: disks[0] (a flavor's root disk) over the spec's image when it
// names one, a flavor's ephemeral and swap disks over their blank
// templates, every other disk blank with its size. A disk whose file
// exists (an earlier apply made it) is kept as it is. It only reads (but
// for making a missing template); the field errors say what a spec
// lacks.
func (c *Controller) planDisks(ctx context.Context, in *model.Instance) ([]diskPlan, error) {
	var plans []diskPlan
	var errs []model.FieldError
	kinded := hasKinds(in)
	for i, d := range in.Disks {
		p, err := virt.ResolveInDataDir(c.dataDir, filepath.Join("instances", in.Name, diskFileOf(d)))
		if err != nil {
			errs = append(errs, model.FieldError{Field: fmt.Sprintf("disks[%d]", i), Value: d.Name, Rule: err.Error()})
			continue
		}
		if _, err := os.Stat(p); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("disk %s: %w", d.Name, err)
		}
		plan := diskPlan{target: d.Name, Disk: images.Disk{Path: p, Size: d.Size}, encrypt: d.Encrypted}
		switch {
		case d.Kind == model.DiskKindEphemeral || d.Kind == model.DiskKindSwap:
			// An overlay of the blank template of its size, made now if
			// the cache has none (a template is no instance's: it stays).
			base, err := c.blankTemplate(ctx, d)
			if err != nil {
				return nil, fmt.Errorf("disk %s: %w", d.Name, err)
			}
			plan.Base, plan.Size = &base, ""
		case d.Kind == model.DiskKindRoot && in.Image == "" && d.Size != "":
			// A flavor's root disk without an image: blank.
		case (d.Kind == model.DiskKindRoot || i == 0 && !kinded) && in.Image != "":
			base, err := c.images.Lookup(ctx, in.Image)
			if err != nil {
				errs = append(errs, model.FieldError{Field: "image", Value: in.Image, Rule: err.Error()})
				continue
			}
			plan.Base, plan.image = &base, in.Image
		case d.Size == "":
			rule := "is required to create the disk (only disks[0] is created from the spec's image)"
			if in.Image == "" {
				rule = "is required to create the disk (the spec names no image)"
			}
			errs = append(errs, model.FieldError{Field: fmt.Sprintf("disks[%d].size", i), Rule: rule})
			continue
		}
		plans = append(plans, plan)
	}
	if len(errs) > 0 {
		return nil, &model.SpecError{Errors: errs}
	}
	return plans, nil
}

// createDisks creates the planned images of instance in — encrypted ones
// with their own secret (encryption.go) — records how each was made (its
// block-device record) and registers their removal as undo steps.
func (c *Controller) createDisks(ctx context.Context, r *revert.Reverter, in *model.Instance, plans []diskPlan) error {
	if err := c.startDisks(ctx, r, plans)(); err != nil {
		return err
	}
	return c.finishDisks(ctx, r, in, plans)
}

// startDisks registers the removal of every planned image (first: a
// failing qemu-img may leave a partial file) and starts making the plain
// ones at once, a qemu-img each (issue 23 item 4: four disks one after
// the other were most of an apply). The function it returns waits until
// every one has ended — call it before returning or undoing anything, so
// that an undo never races a qemu-img still writing — and returns the
// first error in the plans' order; it may be called again.
func (c *Controller) startDisks(ctx context.Context, r *revert.Reverter, plans []diskPlan) (wait func() error) {
	for _, p := range plans {
		r.Add("remove disk image "+p.Path, func(context.Context) error { return removeFile(p.Path) })
	}
	errs := make([]error, len(plans))
	var wg sync.WaitGroup
	for i, p := range plans {
		if p.encrypt {
			continue
		}
		wg.Go(func() {
			if err := c.images.Create(ctx, p.Disk); err != nil {
				errs[i] = fmt.Errorf("create disk %s: %w", p.target, err)
			}
		})
	}
	return func() error {
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// finishDisks, once startDisks' plain images are made, creates the
// encrypted ones one by one (each has a secret and undo steps of its own)
// and records how every planned disk was made.
func (c *Controller) finishDisks(ctx context.Context, r *revert.Reverter, in *model.Instance, plans []diskPlan) error {
	upd := map[string]*encryption.BlockDevice{}
	created := time.Now().UTC().Truncate(time.Second)
	for _, p := range plans {
		if p.encrypt {
			continue
		}
		upd[p.target] = &encryption.BlockDevice{Disk: p.target, Created: created}
		c.log.Debug("disk created", "disk", p.Path, "base", p.Base, "size", p.Size, "encrypted", false)
	}
	for _, p := range plans {
		if !p.encrypt {
			continue
		}
		made, err := c.createEncrypted(ctx, r, in, p)
		if err != nil {
			return err
		}
		upd[p.target] = &made
		c.log.Debug("disk created", "disk", p.Path, "base", p.Base, "size", p.Size, "encrypted", made.Encrypted)
	}
	return c.updateBlockDevices(ctx, r, in, upd)
}

func removeFile(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
