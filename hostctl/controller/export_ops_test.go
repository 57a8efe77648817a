package controller

import (
	"context"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
)

// The operations of hostctl/ops for this package's tests, which drive
// them as e.c.Shelve(...), e.c.AttachDisk(...), e.c.Reboot(...) and so on: hostctl/ops imports this package, so
// a test file of package controller cannot import it; ops_wiring_test.go
// (package controller_test, in the same test binary) sets opsOf in its
// init to hostctl/ops over the controller under test.

// Operations are the operations hostctl/ops composes from the core.
type Operations interface {
	Shelve(ctx context.Context, name string) (*Instance, error)
	Unshelve(ctx context.Context, name string) (*Instance, error)
	Rescue(ctx context.Context, name string, req RescueRequest) (*Instance, error)
	Unrescue(ctx context.Context, name string) (*Instance, error)
	Resize(ctx context.Context, name, flavor string) (*Instance, error)
	Rebuild(ctx context.Context, name, image string) (*Instance, error)
	Snapshot(ctx context.Context, name string, req SnapshotRequest) (images.Image, error)
	SnapshotAnyProject(ctx context.Context, name string, req SnapshotRequest) (images.Image, error)
	AttachDisk(ctx context.Context, name string, req types.DiskRequest) (*Instance, error)
	DetachDisk(ctx context.Context, name string, req types.DetachRequest) (*Instance, error)
	AttachNIC(ctx context.Context, name string, req types.NICRequest) (*Instance, error)
	DetachNIC(ctx context.Context, name string, req types.DetachRequest) (*Instance, error)
	Reboot(ctx context.Context, name string, hard bool) (*Instance, error)
}

// The requests of a snapshot and of a rescue.
type (
	SnapshotRequest = types.SnapshotRequest
	RescueRequest   = types.RescueRequest
)

// rescueDisk is the block-device record key of a rescue disk (a rescue
// begun by an older hostctl kept a secret copy under it).
const rescueDisk = disks.RescueDisk

// opsOf returns the operations over a controller, ShelvedImageName the
// image a shelve of an instance makes (hostctl/ops'; both set by
// ops_wiring_test.go).
var (
	opsOf            func(*Controller) Operations
	ShelvedImageName func(instance string) string
)

// SetOperations sets how the tests get the operations over a controller
// and the name of a shelved instance's image.
func SetOperations(f func(*Controller) Operations, shelvedImageName func(string) string) {
	opsOf, ShelvedImageName = f, shelvedImageName
}

func (c *Controller) Shelve(ctx context.Context, name string) (*Instance, error) {
	return opsOf(c).Shelve(ctx, name)
}

func (c *Controller) Unshelve(ctx context.Context, name string) (*Instance, error) {
	return opsOf(c).Unshelve(ctx, name)
}

func (c *Controller) Rescue(ctx context.Context, name string, req RescueRequest) (*Instance, error) {
	return opsOf(c).Rescue(ctx, name, req)
}

func (c *Controller) Unrescue(ctx context.Context, name string) (*Instance, error) {
	return opsOf(c).Unrescue(ctx, name)
}

func (c *Controller) Resize(ctx context.Context, name, flavor string) (*Instance, error) {
	return opsOf(c).Resize(ctx, name, flavor)
}

func (c *Controller) Rebuild(ctx context.Context, name, image string) (*Instance, error) {
	return opsOf(c).Rebuild(ctx, name, image)
}

func (c *Controller) Snapshot(ctx context.Context, name string, req SnapshotRequest) (images.Image, error) {
	return opsOf(c).Snapshot(ctx, name, req)
}

func (c *Controller) SnapshotAnyProject(ctx context.Context, name string, req SnapshotRequest) (images.Image, error) {
	return opsOf(c).SnapshotAnyProject(ctx, name, req)
}

func (c *Controller) AttachDisk(ctx context.Context, name string, req types.DiskRequest) (*Instance, error) {
	return opsOf(c).AttachDisk(ctx, name, req)
}

func (c *Controller) DetachDisk(ctx context.Context, name string, req types.DetachRequest) (*Instance, error) {
	return opsOf(c).DetachDisk(ctx, name, req)
}

func (c *Controller) AttachNIC(ctx context.Context, name string, req types.NICRequest) (*Instance, error) {
	return opsOf(c).AttachNIC(ctx, name, req)
}

func (c *Controller) DetachNIC(ctx context.Context, name string, req types.DetachRequest) (*Instance, error) {
	return opsOf(c).DetachNIC(ctx, name, req)
}

func (c *Controller) Reboot(ctx context.Context, name string, hard bool) (*Instance, error) {
	return opsOf(c).Reboot(ctx, name, hard)
}
