package disks

import (
	"context"
	"fmt"

	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/parts/disks/qcow2"
	"github.com/vmeta/vmeta/internal/model"
)

// blankInGo is the part's default disk maker (issue 23 item 4): a blank
// disk — no backing file, a size of at most qcow2.MaxBlank — is written
// in Go (hostctl/parts/disks/qcow2: the bytes qemu-img create writes),
// any other through Images: an overlay of an image or a template is
// qemu-img's, which checks the backing file. Four blank disks were four
// qemu-img processes, the most of a new instance's apply on a loaded
// host. Encrypted disks are never made here (LUKS, encryption.go).
type blankInGo struct{ Images }

func (b blankInGo) Create(ctx context.Context, d images.Disk) error {
	size, ok := blankSize(d)
	if !ok {
		return b.Images.Create(ctx, d)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("create disk image %s: %w", d.Path, err)
	}
	if err := qcow2.Create(d.Path, size); err != nil {
		return fmt.Errorf("create disk image %s: %w", d.Path, err)
	}
	return nil
}

// blankSize is d's size when blankInGo writes it itself.
func blankSize(d images.Disk) (int64, bool) {
	if d.Base != nil || d.Size == "" { // images.DiskFormat is qcow2
		return 0, false
	}
	n, err := model.ParseDiskSize(d.Size)
	if err != nil || n > qcow2.MaxBlank {
		return 0, false // qemu-img's, and its error
	}
	return n, true
}
