// Package images makes the disk images of instances with qemu-img: it
// finds base images by name in the image directory, asks qemu-img their
// format, and creates qcow2 disks — blank, or overlays over a base image.
// It holds hostctl's file-format knowledge; the controller only decides
// which disks to make.
package images

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/vmeta/vmeta/hostctl/internal/keylock"
)

// DiskFormat is the format of every disk image hostctl creates.
const DiskFormat = "qcow2"

// Dir is a directory of base images and the qemu-img that makes disks.
type Dir struct {
	path    string
	qemuImg string
	locks   keylock.Map // per image name (catalog.go) and template (templates.go)
	use     useLocks    // images in use by applies (use.go)
}

// Options configure a Dir.
type Options struct {
	// QemuImg is the qemu-img binary; "qemu-img" (from PATH) when empty.
	QemuImg string
}

// New returns the image directory path.
func New(path string, opts Options) *Dir {
	d := &Dir{path: path, qemuImg: opts.QemuImg}
	if d.qemuImg == "" {
		d.qemuImg = "qemu-img"
	}
	return d
}

// Base is a base image: its file and its format (a qcow2 overlay names
// it).
type Base struct {
	Path, Format string
}

// Lookup finds a base image by name in the image directory: an imported
// image by its sidecar (catalog.go), else the file itself, or
// name.qcow2, name.img or name.raw, whose format it asks qemu-img. The
// name must be a file name, not a path.
func (d *Dir) Lookup(ctx context.Context, name string) (Base, error) {
	if CheckName(name) == nil {
		if b, err := os.ReadFile(d.sidecar(name)); err == nil {
			img, err := decodeSidecar(b)
			if err != nil || img.File == "" || img.Format == "" {
				return Base{}, fmt.Errorf("image %s: sidecar %s is damaged", name, d.sidecar(name))
			}
			return Base{Path: filepath.Join(d.path, img.File), Format: img.Format}, nil
		}
	}
	p, err := d.resolve(name)
	if err != nil {
		return Base{}, err
	}
	format, err := d.format(ctx, p)
	if err != nil {
		return Base{}, err
	}
	return Base{Path: p, Format: format}, nil
}

func (d *Dir) resolve(name string) (string, error) {
	if name == "." || name == ".." || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("must name a file in the image directory %s (no path)", d.path)
	}
	for _, cand := range []string{name, name + ".qcow2", name + ".img", name + ".raw"} {
		p := filepath.Join(d.path, cand)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("no such image in %s", d.path)
}

// format asks qemu-img for an image's format.
func (d *Dir) format(ctx context.Context, path string) (string, error) {
	out, err := exec.CommandContext(ctx, d.qemuImg, "info", "--output=json", "-U", path).Output()
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

// Disk is a disk image to create.
type Disk struct {
	// Path of the new image; it must not exist.
	Path string
	// Size of the disk (qemu-img syntax, "10G"); a disk over a base image
	// takes the base's size when empty.
	Size string
	// Base, when set, makes the disk a qcow2 overlay of it.
	Base *Base
}

// Create creates a qcow2 disk image. A failed qemu-img may leave a
// partial file at disk.Path: the caller removes it.
func (d *Dir) Create(ctx context.Context, disk Disk) error {
	args := []string{"create", "-q", "-f", DiskFormat}
	if disk.Base != nil {
		args = append(args, "-b", disk.Base.Path, "-F", disk.Base.Format)
	}
	args = append(args, disk.Path)
	if disk.Size != "" {
		args = append(args, disk.Size)
	}
	if out, err := exec.CommandContext(ctx, d.qemuImg, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
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
