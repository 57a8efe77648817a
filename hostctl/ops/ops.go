// Package ops is the operations of an instance composed from the core's
// and the parts' phases: shelve and unshelve (shelve.go), rescue and
// unrescue (rescue.go), resize (resize.go), rebuild (rebuild.go) and
// snapshot (snapshot.go), Nova's operations translated to one host
// (issue: ephemeral storage encryption, item 8).
//
// Each operation holds the instance's lock, finds the instance in the
// state it needs, lets the parts (hostctl/part) check and prepare it,
// and changes the host step by step, every step undone when a later one
// fails (internal/revert). What an operation needs of the controller
// core is Core, a narrow interface the core implements
// (hostctl/controller, core_ops.go); the core does not know the
// operations: the daemon wires them into the admin API
// (api.Services.Shelve, Resize and Snapshot).
package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// Core is what the operations need of the controller core
// (hostctl/controller, core_ops.go). Every method taking a
// *revert.Reverter registers the undo of what it did on it.
type Core interface {
	// The frame of an operation: the instance's lock, the observation of
	// its outcome, its events, the instance as the API shows it.
	LockInstance(name string) (unlock func())
	Observe(op string, start time.Time, err *error)
	Emit(ctx context.Context, stream, typ string, payload any)
	Logger() *slog.Logger
	// Capabilities: the host has a hypervisor; its store keeps records
	// (block devices, states).
	Capabilities() (hypervisor, records bool)
	Get(ctx context.Context, name string) (*controller.Instance, error)

	// OpInstance is this host's instance name for op, in the state op
	// needs, checked by the parts for op; RequireState refuses one not
	// in state want and returns its state record.
	OpInstance(ctx context.Context, op part.Op, name string, need controller.Need) (store.Instance, *model.Instance, error)
	RequireState(ctx context.Context, rec store.Instance, want string) (controller.VMState, int64, error)
	PutVMState(ctx context.Context, r *revert.Reverter, uuid string, st controller.VMState) error
	DropVMState(ctx context.Context, r *revert.Reverter, uuid string, st controller.VMState, ver int64) error

	// The parts' phases for an operation (Check is OpInstance's).
	PrepareParts(ctx context.Context, op part.Op, r *revert.Reverter, in *model.Instance, host *virt.Host) error

	// Files, disks and their block-device records.
	DataDir() string
	InstanceDir(name string) string
	DiskFile(in *model.Instance, d model.Disk) string
	SetAside(r *revert.Reverter, path string) (aside string, err error)
	PlanDisks(ctx context.Context, r *revert.Reverter, in *model.Instance) ([]controller.DiskPlan, error)
	BlockDevices(ctx context.Context, uuid string) (map[string]encryption.BlockDevice, error)
	UpdateBlockDevices(ctx context.Context, r *revert.Reverter, in *model.Instance, upd map[string]*encryption.BlockDevice) error
	ResizeDisk(ctx context.Context, in *model.Instance, disk, path string, size int64, shrink bool) error
	DiskImages() controller.Images
	ImageDir() *images.Dir
	Encryption() (controller.KeyManager, controller.LUKS)

	// Layouts: in for another flavor or root image, as an apply lays
	// instances out; ApplyFor applies it (disks, domain, publish) for op.
	ResizeLayout(ctx context.Context, old *model.Instance, flavor string) (*model.Instance, *flavors.Flavor, error)
	RebuildLayout(ctx context.Context, old *model.Instance, img *images.Image) (*model.Instance, error)
	ApplyFor(ctx context.Context, op part.Op, in, old *model.Instance, expect int64) (*controller.Instance, error)

	// The domain, its power and its secrets.
	CurrentDomain(ctx context.Context, name, uuid string) (*controller.Domain, error)
	DomainHost(ctx context.Context, in *model.Instance) (virt.Host, virt.Options, error)
	DefineDomain(ctx context.Context, r *revert.Reverter, name string, doc, prev []byte) error
	RemoveDomain(ctx context.Context, r *revert.Reverter, in *model.Instance) error
	ReadBack(ctx context.Context, in *model.Instance) error
	Publish(ctx context.Context, r *revert.Reverter, in *model.Instance, expect int64) error
	Shutdown(ctx context.Context, r *revert.Reverter, rec store.Instance, timeout time.Duration, again func(context.Context) error) error
	UndefineSecrets(ctx context.Context, uuid string) error
	Boot(ctx context.Context, r *revert.Reverter, rec store.Instance, in *model.Instance, extra func(context.Context, *revert.Reverter) error) error
	StartDomain(ctx context.Context, rec store.Instance) error
	ReleaseHost(ctx context.Context, in *model.Instance)
	DefineDiskSecret(ctx context.Context, r *revert.Reverter, in *model.Instance, disk, keyID, libvirtUUID string) error
	DeleteSecrets(ctx context.Context, in *model.Instance, ids []string)
	ReleaseSecret(ctx context.Context, id, image string) error
	LockSecret(id string) (unlock func())
}

var _ Core = (*controller.Controller)(nil)

// Ops runs the operations over a core.
type Ops struct {
	core Core
	log  *slog.Logger
}

// New returns the operations over core.
func New(core Core) *Ops { return &Ops{core: core, log: core.Logger()} }

// rootIndex is the index of the instance's root disk (the first disk when
// none is made from an image), -1 when it has no disk.
func rootIndex(in *model.Instance) int {
	root := controller.RootDisk(in)
	if root < 0 && len(in.Disks) > 0 {
		root = 0
	}
	return root
}

// clone deep-copies an instance.
func clone(in *model.Instance) *model.Instance {
	b, err := json.Marshal(in)
	if err != nil {
		panic(fmt.Sprintf("clone instance: %v", err))
	}
	var out model.Instance
	if err := json.Unmarshal(b, &out); err != nil {
		panic(fmt.Sprintf("clone instance: %v", err))
	}
	return &out
}

// sameSpec reports whether a and b are the same spec (a part's Prepare
// left it as it was).
func sameSpec(a, b *model.Instance) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && string(ja) == string(jb)
}

func removeFile(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
