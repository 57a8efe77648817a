package images

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Templates of blank disks, as Nova's libvirt driver makes them: a raw,
// sparse file formatted once per size (mkfs for an ephemeral disk,
// mkswap for swap) and kept in a cache directory, and each instance's
// disk a qcow2 overlay over it. A template holds no data of any instance
// (a blank filesystem, an empty swap signature), so it is never
// encrypted; an encrypted disk is an encrypted overlay over it.

// Ephemeral disks are formatted as Nova's default_ephemeral_format does
// for Linux guests: ext4, labelled ephemeral0, which cloud-init's
// cc_mounts mounts at /mnt.
const (
	EphemeralFS    = "ext4"
	EphemeralLabel = "ephemeral0"
)

// Template kinds.
const (
	TemplateEphemeral = "ephemeral"
	TemplateSwap      = "swap"
)

// Templates makes and caches blank-disk templates in a directory.
type Templates struct {
	dir           string
	mkfs, mkswap  string
	dirOfTemplate *Dir // for its locks
}

// NewTemplates returns the template cache in dir (Nova: instances/_base).
func (d *Dir) NewTemplates(dir string) *Templates {
	t := &Templates{dir: dir, mkfs: "mkfs." + EphemeralFS, mkswap: "mkswap", dirOfTemplate: d}
	for _, p := range []*string{&t.mkfs, &t.mkswap} {
		if _, err := exec.LookPath(*p); err != nil {
			for _, sbin := range []string{"/usr/sbin", "/sbin"} {
				if c := filepath.Join(sbin, *p); fileExists(c) {
					*p = c
					break
				}
			}
		}
	}
	return t
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// Template returns the template of a blank disk of kind
// (TemplateEphemeral, size in GiB; TemplateSwap, size in MiB), making it
// first if the cache has none: a raw file written under a temporary name
// and renamed into place once formatted.
func (t *Templates) Template(ctx context.Context, kind string, size int) (Base, error) {
	var name string
	var bytes int64
	switch kind {
	case TemplateEphemeral:
		name, bytes = fmt.Sprintf("ephemeral_%dG_%s", size, EphemeralFS), int64(size)<<30
	case TemplateSwap:
		name, bytes = fmt.Sprintf("swap_%dM", size), int64(size)<<20
	default:
		return Base{}, fmt.Errorf("template: unknown kind %q", kind)
	}
	if size <= 0 {
		return Base{}, fmt.Errorf("template %s: size must be positive", name)
	}
	p := filepath.Join(t.dir, name)
	defer t.dirOfTemplate.locks.Lock("template/" + name)()
	if fileExists(p) {
		return Base{Path: p, Format: "raw"}, nil
	}
	if err := os.MkdirAll(t.dir, 0o750); err != nil {
		return Base{}, fmt.Errorf("template %s: %w", name, err)
	}
	tmp := p + ".making"
	_ = os.Remove(tmp)
	defer os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		return Base{}, fmt.Errorf("template %s: %w", name, err)
	}
	err = f.Truncate(bytes)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Base{}, fmt.Errorf("template %s: %w", name, err)
	}
	var cmd *exec.Cmd
	if kind == TemplateEphemeral {
		cmd = exec.CommandContext(ctx, t.mkfs, "-F", "-q", "-L", EphemeralLabel, tmp)
	} else {
		cmd = exec.CommandContext(ctx, t.mkswap, "-L", "swap", tmp)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return Base{}, fmt.Errorf("template %s: %s: %w: %s", name, strings.Join(cmd.Args, " "), err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(tmp, p); err != nil {
		return Base{}, fmt.Errorf("template %s: %w", name, err)
	}
	return Base{Path: p, Format: "raw"}, nil
}

// Resize grows a qcow2 disk image to size bytes; it never shrinks one
// (a smaller size is an error naming both sizes).
func (d *Dir) Resize(ctx context.Context, path string, size int64) error {
	in, err := d.info(ctx, path)
	if err != nil {
		return fmt.Errorf("resize %s: %w", path, err)
	}
	switch {
	case size == in.VirtualSize:
		return nil
	case size < in.VirtualSize:
		return fmt.Errorf("resize %s: %d bytes is smaller than its %d: disks are never shrunk", path, size, in.VirtualSize)
	}
	args := []string{"resize", "-q", "-f", in.Format, path, fmt.Sprint(size)}
	if out, err := exec.CommandContext(ctx, d.qemuImg, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// VirtualSize is the size of the disk a guest sees in an image file.
func (d *Dir) VirtualSize(ctx context.Context, path string) (int64, error) {
	in, err := d.info(ctx, path)
	if err != nil {
		return 0, err
	}
	return in.VirtualSize, nil
}

// Exists reports whether p exists (an error other than "does not exist"
// is returned).
func Exists(p string) (bool, error) {
	_, err := os.Stat(p)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
}

// ShrinkBack returns a disk just grown by Resize to its earlier size (an
// undo step: the space beyond it was never written by a guest).
func (d *Dir) ShrinkBack(ctx context.Context, path string, size int64) error {
	args := []string{"resize", "-q", "--shrink", "-f", DiskFormat, path, fmt.Sprint(size)}
	if out, err := exec.CommandContext(ctx, d.qemuImg, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
