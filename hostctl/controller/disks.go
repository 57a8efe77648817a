package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
)

// Host files of an instance, under <data dir>/instances/<name>/:
//
//	disk-<target>.qcow2   each disk (qcow2; over the spec's image for disks[0])
//	disk.config           the config drive (ISO 9660 or vfat)
//	console.log           the serial console (written by virtlogd)
const (
	driveFile   = "disk.config"
	consoleFile = "console.log"
)

func diskFile(target string) string { return "disk-" + target + ".qcow2" }

// host is where the instance's files live, for virt.BuildDomain.
func (c *Controller) host(in *model.Instance) virt.Host {
	rel := filepath.Join("instances", in.Name)
	h := virt.Host{
		DataDir:     c.dataDir,
		Disks:       make(map[string]virt.DiskSource, len(in.Disks)),
		ConfigDrive: filepath.Join(rel, driveFile),
		SerialLog:   filepath.Join(rel, consoleFile),
	}
	for _, d := range in.Disks {
		h.Disks[d.Name] = virt.DiskSource{Path: filepath.Join(rel, diskFile(d.Name)), Format: "qcow2"}
	}
	return h
}

// diskPlan is a disk image to create.
type diskPlan struct {
	target string
	path   string // absolute
	// base and baseFormat, when set, make the disk a qcow2 overlay.
	base, baseFormat string
	size             string
}

// planDisks decides how each disk of in that has no image file yet is
// created: disks[0] over the spec's image when it names one, every other
// disk blank with its size. A disk whose file exists (an earlier apply
// made it) is kept as it is. It only reads; the field errors say what a
// spec lacks.
func (c *Controller) planDisks(ctx context.Context, in *model.Instance) ([]diskPlan, error) {
	var plans []diskPlan
	var errs []model.FieldError
	for i, d := range in.Disks {
		p, err := virt.ResolveInDataDir(c.dataDir, filepath.Join("instances", in.Name, diskFile(d.Name)))
		if err != nil {
			errs = append(errs, model.FieldError{Field: fmt.Sprintf("disks[%d]", i), Value: d.Name, Rule: err.Error()})
			continue
		}
		if _, err := os.Stat(p); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("disk %s: %w", d.Name, err)
		}
		plan := diskPlan{target: d.Name, path: p, size: d.Size}
		switch {
		case i == 0 && in.Image != "":
			base, err := c.resolveImage(in.Image)
			if err != nil {
				errs = append(errs, model.FieldError{Field: "image", Value: in.Image, Rule: err.Error()})
				continue
			}
			format, err := c.imageFormat(ctx, base)
			if err != nil {
				errs = append(errs, model.FieldError{Field: "image", Value: in.Image, Rule: err.Error()})
				continue
			}
			plan.base, plan.baseFormat = base, format
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

// resolveImage finds a base image by name in the image directory: the
// file itself, or name.qcow2, name.img or name.raw.
func (c *Controller) resolveImage(name string) (string, error) {
	if name == "." || name == ".." || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("must name a file in the image directory %s (no path)", c.imageDir)
	}
	for _, cand := range []string{name, name + ".qcow2", name + ".img", name + ".raw"} {
		p := filepath.Join(c.imageDir, cand)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("no such image in %s", c.imageDir)
}

// imageFormat asks qemu-img for an image's format (qcow2 needs it named
// for a backing file).
func (c *Controller) imageFormat(ctx context.Context, path string) (string, error) {
	out, err := exec.CommandContext(ctx, c.qemuImg, "info", "--output=json", "-U", path).Output()
	if err != nil {
		return "", fmt.Errorf("qemu-img info %s: %w%s", path, err, stderrOf(err))
	}
	var info struct {
		Format string `json:"format"`
	}
	if err := json.Unmarshal(out, &info); err != nil || info.Format == "" {
		return "", fmt.Errorf("qemu-img info %s: no format in %q", path, out)
	}
	return info.Format, nil
}

// createDisks creates the planned images with qemu-img and registers
// their removal as undo steps.
func (c *Controller) createDisks(ctx context.Context, r *revert.Reverter, plans []diskPlan) error {
	for _, p := range plans {
		args := []string{"create", "-q", "-f", "qcow2"}
		if p.base != "" {
			args = append(args, "-b", p.base, "-F", p.baseFormat)
		}
		args = append(args, p.path)
		if p.size != "" {
			args = append(args, p.size)
		}
		// Registered first: a failing qemu-img may leave a partial file.
		r.Add("remove disk image "+p.path, func(context.Context) error { return removeFile(p.path) })
		if out, err := exec.CommandContext(ctx, c.qemuImg, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("create disk %s: qemu-img %s: %w: %s", p.target, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		c.log.Debug("disk created", "disk", p.path, "base", p.base, "size", p.size)
	}
	return nil
}

func removeFile(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}
