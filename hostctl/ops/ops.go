// Package ops is the operations of an instance composed from the core's
// and the parts' phases: shelve and unshelve (shelve.go), rescue and
// unrescue (rescue.go), resize (resize.go), rebuild (rebuild.go),
// snapshot (snapshot.go), Nova's operations translated to one host
// (issue: ephemeral storage encryption, item 8), reboot, soft and hard
// (reboot.go), the hot-plug of disks and NICs (hotplug.go, over
// devicechange.go), and the adopt and forced delete of a dead host's
// instance (adopt.go, forcedelete.go).
//
// Each operation holds the instance's lock, finds the instance in the
// state it needs (instance.go), lets the parts (hostctl/part) check and
// prepare it, and changes the host step by step, every step undone when a
// later one fails (internal/revert). What an operation needs of the
// controller core is a few narrow roles (Frame, Files, Domains, Host,
// Layouts, DeviceChanges, Power, Owners, RecordParts) the core implements
// (hostctl/controller, core_ops.go, core_devchange.go); of the disks part
// (hostctl/parts/disks, registered among the core's parts) the Disks,
// Volumes, Images, Secrets and LibvirtSecrets roles; of the hypervisor
// (the core's Hypervisor) HotPlug and InPlace; of the other parts Faults,
// MACClaims and States. Each operation holds only the roles it uses. The core does not know the
// operations: the daemon wires them into the admin API
// (api.Services.Shelve, Resize, Snapshot, Hotplug, Reboot and Ownership).
package ops

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/vmeta/vmeta/hostctl/api/types"
	"github.com/vmeta/vmeta/hostctl/controller"
	"github.com/vmeta/vmeta/hostctl/encryption"
	"github.com/vmeta/vmeta/hostctl/flavors"
	"github.com/vmeta/vmeta/hostctl/images"
	"github.com/vmeta/vmeta/hostctl/layout"
	"github.com/vmeta/vmeta/hostctl/part"
	"github.com/vmeta/vmeta/hostctl/parts/disks"
	"github.com/vmeta/vmeta/hostctl/parts/vmstate"
	"github.com/vmeta/vmeta/hostctl/virt"
	"github.com/vmeta/vmeta/internal/model"
	"github.com/vmeta/vmeta/internal/revert"
	"github.com/vmeta/vmeta/internal/store"
)

// What the operations need of the controller core (hostctl/controller,
// core_ops.go) and of the disks part (hostctl/parts/disks, registered
// among the core's parts), by role, each role a narrow interface:
// Frame, Files, Disks, Images, Domains, Host, Secrets, Layouts, Applier. Every method taking a
// *revert.Reverter registers the undo of what it did on it. Each
// operation holds only the roles it uses (shelver, rescuer, resizer,
// rebuilder, snapshotter); no interface here has more than 8 methods
// (TestRolesAreNarrow).

// Frame is the frame of an operation: the instance's lock, the
// observation of its outcome, its events, the instance and its domain
// (instance.go).
type Frame interface {
	LockInstance(name string) (unlock func())
	Observe(op string, start time.Time, err *error)
	Emit(ctx context.Context, stream, typ string, payload any)
	// Get is the instance as the API shows it.
	Get(ctx context.Context, name string) (*controller.Instance, error)
	// Capabilities: the host has a hypervisor; its store keeps records
	// (block devices, states).
	Capabilities() (hypervisor, records bool)
	// OpInstance is this host's instance name, checked by the parts for
	// op (the states part refuses one shelved or rescued, or for
	// unshelve and unrescue one that is not); what names the operation
	// in errors.
	OpInstance(ctx context.Context, what string, op part.Op, name string) (store.Instance, *model.Instance, error)
	// CurrentDomain is the domain named name (nil when libvirt has
	// none); with uuid, an ErrState error when it has none of that UUID.
	CurrentDomain(ctx context.Context, name, uuid string) (*controller.Domain, error)
}

// States is the part that keeps the instances' states (shelved,
// rescued: hostctl/parts/vmstate, registered with the core): Require
// returns the state record of an instance in state want (refusing one
// that is not) and its version, Put records one, Drop ends one.
type States interface {
	Require(ctx context.Context, name, uuid, want string) (vmstate.Record, int64, error)
	Put(ctx context.Context, r *revert.Reverter, uuid string, st vmstate.Record) error
	Drop(ctx context.Context, r *revert.Reverter, uuid string, st vmstate.Record, ver int64) error
}

// Files is where an instance's files are (a disk's file: diskFile).
type Files interface {
	DataDir() string
	InstanceDir(name string) string
	// MakeInstanceDir makes the directory of instance name's files (the
	// undo step on r removes what it made).
	MakeInstanceDir(r *revert.Reverter, name string) error
}

// Disks is the disks part (hostctl/parts/disks):
// how the disks of an instance that have no file yet are made, their
// block-device records, their size, libvirt's copy of a disk's
// passphrase and the deletion of the key-manager secrets nothing names
// any more (its one rule).
type Disks interface {
	Plans(ctx context.Context, in *model.Instance) ([]disks.Plan, error)
	BlockDevices(ctx context.Context, uuid string) (encryption.BlockDevices, error)
	UpdateBlockDevices(ctx context.Context, r *revert.Reverter, in *model.Instance, upd map[string]*encryption.BlockDevice) error
	ResizeDisk(ctx context.Context, in *model.Instance, disk, path string, size int64, shrink bool) error
	DefineDiskSecret(ctx context.Context, r *revert.Reverter, in *model.Instance, disk, keyID, libvirtUUID string) error
	DeleteSecrets(ctx context.Context, in *model.Instance, ids []string)
	ReleaseSecret(ctx context.Context, id, image string) error
}

// Images is the disks part's disk-image layer and its image catalog.
type Images interface {
	DiskImages() disks.Images
	ImageDir() *images.Dir
}

// Domains is an instance's libvirt domain and its power.
type Domains interface {
	DomainHost(ctx context.Context, in *model.Instance) (virt.Host, virt.Options, error)
	DefineDomain(ctx context.Context, r *revert.Reverter, name string, doc, prev []byte) error
	RemoveDomain(ctx context.Context, r *revert.Reverter, in *model.Instance) error
	ReadBack(ctx context.Context, in *model.Instance) error
	// StopDomain shuts a running domain down and undefines its libvirt
	// secrets; Boot starts one an operation defined; Resume starts one
	// whose state (States.Drop) just ended as start does.
	StopDomain(ctx context.Context, r *revert.Reverter, rec store.Instance, running bool, timeout time.Duration, again func(context.Context) error) error
	Boot(ctx context.Context, r *revert.Reverter, rec store.Instance, in *model.Instance, extra func(context.Context, *revert.Reverter) error) error
	Resume(ctx context.Context, rec store.Instance) error
}

// Host is what an instance has on this host besides its disks and
// domain: what the parts give it (their Prepare phase for an operation),
// its published metadata.
type Host interface {
	PrepareParts(ctx context.Context, op part.Op, r *revert.Reverter, in *model.Instance, host *virt.Host) error
	Publish(ctx context.Context, r *revert.Reverter, in *model.Instance, expect int64) error
}

// Secrets is the disks part's key manager and LUKS layer and its
// per-secret lock.
type Secrets interface {
	Encryption() (disks.KeyManager, disks.LUKS)
	LockSecret(id string) (unlock func())
}

// Layouts is an instance laid out for another flavor or root image, as
// an apply lays instances out (hostctl/layout, the core's Layouts).
type Layouts interface {
	// EncryptAttached applies in's encryption decision to d, a disk
	// attached to it.
	EncryptAttached(ctx context.Context, in *model.Instance, d *model.Disk) error
	Resize(ctx context.Context, old *model.Instance, flavor string) (*model.Instance, *flavors.Flavor, error)
	Rebuild(ctx context.Context, old *model.Instance, img *images.Image) (*model.Instance, error)
}

// Applier applies an instance laid out anew (disks, domain, publish)
// for op.
type Applier interface {
	ApplyFor(ctx context.Context, op part.Op, in, old *model.Instance, expect int64) (*controller.Instance, error)
}

// base is what every operation has: its frame and the logger.
type base struct {
	frame Frame
	log   *slog.Logger
}

// snapshotter makes images of instances' root disks (snapshot.go).
type snapshotter struct {
	base
	files   Files
	disks   Disks
	images  Images
	secrets Secrets
}

// shelver shelves and unshelves (shelve.go); a shelve snapshots.
type shelver struct {
	*snapshotter
	domains Domains
	host    Host
	states  States
	libvirt LibvirtSecrets
}

// rescuer rescues and unrescues (rescue.go).
type rescuer struct {
	base
	files   Files
	disks   Disks
	images  Images
	domains Domains
	host    Host
	secrets Secrets
	states  States
}

// resizer resizes (resize.go), rebuilder rebuilds (rebuild.go).
type (
	resizer struct {
		base
		files   Files
		disks   Disks
		images  Images
		layouts Layouts
		apply   Applier
	}
	rebuilder struct {
		base
		files   Files
		disks   Disks
		images  Images
		layouts Layouts
		apply   Applier
	}
)

// Ops runs the operations over the core.
type Ops struct {
	shelve   *shelver
	rescue   *rescuer
	resize   *resizer
	rebuild  *rebuilder
	snapshot *snapshotter
	hotplug  *hotplugger
	reboot   *rebooter
	adopt    *adopter
}

// New returns the operations over the core c, each holding only the
// roles of c it uses.
func New(c *controller.Controller) *Ops {
	b := base{frame: c, log: c.Logger()}
	dp := diskPart(c)
	snap := &snapshotter{base: b, files: c, disks: dp, images: dp, secrets: dp}
	st := statesOf(c.Parts())
	return &Ops{
		shelve:   &shelver{snapshotter: snap, domains: c, host: c, states: st, libvirt: dp},
		rescue:   &rescuer{base: b, files: c, disks: dp, images: dp, domains: c, host: c, secrets: dp, states: st},
		resize:   &resizer{base: b, files: c, disks: dp, images: dp, layouts: c.Layouts(), apply: c},
		rebuild:  &rebuilder{base: b, files: c, disks: dp, images: dp, layouts: c.Layouts(), apply: c},
		snapshot: snap,
		hotplug:  &hotplugger{base: b, devices: c, hotplug: c.Hypervisor(), files: c, volumes: dp, layouts: c.Layouts(), domains: c, macs: macClaimers(c.Parts())},
		reboot:   &rebooter{base: b, power: c, inPlace: inPlaceOf(c), faults: faultsOf(c.Parts())},
		adopt:    &adopter{base: b, owners: c, parts: c, states: stateKeeperOf(c.Parts())},
	}
}

// diskPart is the disks part registered among c's parts; without one (a
// core wired without disks), a part over c's data directory with no key
// manager and no hypervisor, not bound to c.
func diskPart(c *controller.Controller) *disks.Part {
	for _, p := range c.Parts() {
		if d, ok := p.(*disks.Part); ok {
			return d
		}
	}
	return disks.New(disks.Options{Catalog: images.New(filepath.Join(c.DataDir(), "images"), images.Options{}),
		DataDir: c.DataDir(), Logger: c.Logger()})
}

// faultsOf is the part among parts that keeps the faults of instances in
// ERROR (hostctl/parts/faults), noFaults without one.
func faultsOf(parts []part.Part) Faults {
	for _, p := range parts {
		if f, ok := p.(Faults); ok {
			return f
		}
	}
	return noFaults{}
}

// Shelve shelves the stopped instance name (shelve.go).
func (o *Ops) Shelve(ctx context.Context, name string) (*controller.Instance, error) {
	return o.shelve.Shelve(ctx, name)
}

// Unshelve brings a shelved instance back and starts it (shelve.go).
func (o *Ops) Unshelve(ctx context.Context, name string) (*controller.Instance, error) {
	return o.shelve.Unshelve(ctx, name)
}

// Rescue boots the instance name from a rescue disk (rescue.go).
func (o *Ops) Rescue(ctx context.Context, name string, req types.RescueRequest) (*controller.Instance, error) {
	return o.rescue.Rescue(ctx, name, req)
}

// Unrescue ends a rescue (rescue.go).
func (o *Ops) Unrescue(ctx context.Context, name string) (*controller.Instance, error) {
	return o.rescue.Unrescue(ctx, name)
}

// Resize gives a stopped instance another flavor (resize.go).
func (o *Ops) Resize(ctx context.Context, name, flavorName string) (*controller.Instance, error) {
	return o.resize.Resize(ctx, name, flavorName)
}

// Rebuild makes a stopped instance's root disk anew from another image
// (rebuild.go).
func (o *Ops) Rebuild(ctx context.Context, name, imageName string) (*controller.Instance, error) {
	return o.rebuild.Rebuild(ctx, name, imageName)
}

// Snapshot copies a stopped instance's root disk into a new image
// (snapshot.go).
func (o *Ops) Snapshot(ctx context.Context, name string, req types.SnapshotRequest) (images.Image, error) {
	return o.snapshot.Snapshot(ctx, name, req)
}

// SnapshotAnyProject is Snapshot where encryption_key existing may name a
// secret of any project (snapshot.go).
func (o *Ops) SnapshotAnyProject(ctx context.Context, name string, req types.SnapshotRequest) (images.Image, error) {
	return o.snapshot.SnapshotAnyProject(ctx, name, req)
}

// AttachDisk creates a blank disk and attaches it to the instance name
// (hotplug.go).
func (o *Ops) AttachDisk(ctx context.Context, name string, req types.DiskRequest) (*controller.Instance, error) {
	return o.hotplug.AttachDisk(ctx, name, req)
}

// DetachDisk detaches a disk of the instance name and deletes its image
// (hotplug.go).
func (o *Ops) DetachDisk(ctx context.Context, name string, req types.DetachRequest) (*controller.Instance, error) {
	return o.hotplug.DetachDisk(ctx, name, req)
}

// AttachNIC attaches a NIC to the instance name (hotplug.go).
func (o *Ops) AttachNIC(ctx context.Context, name string, req types.NICRequest) (*controller.Instance, error) {
	return o.hotplug.AttachNIC(ctx, name, req)
}

// DetachNIC detaches a NIC of the instance name (hotplug.go).
func (o *Ops) DetachNIC(ctx context.Context, name string, req types.DetachRequest) (*controller.Instance, error) {
	return o.hotplug.DetachNIC(ctx, name, req)
}

// Reboot reboots the instance name, hard or soft (reboot.go).
func (o *Ops) Reboot(ctx context.Context, name string, hard bool) (*controller.Instance, error) {
	return o.reboot.Reboot(ctx, name, hard)
}

// Adopt makes this host the owner of a dead host's instance (adopt.go).
func (o *Ops) Adopt(ctx context.Context, name string) (*controller.Instance, error) {
	return o.adopt.Adopt(ctx, name)
}

// ForceDeleteFromStore removes the record of a dead host's instance and
// returns what stays on that host (forcedelete.go).
func (o *Ops) ForceDeleteFromStore(ctx context.Context, name string) ([]string, error) {
	return o.adopt.ForceDeleteFromStore(ctx, name)
}

// setAside renames file p out of the way of its replacement; the undo
// step on r puts it back.
func setAside(r *revert.Reverter, p string) (string, error) {
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

// diskFile is the image file of in's disk d.
func diskFile(f Files, in *model.Instance, d model.Disk) string {
	return filepath.Join(f.InstanceDir(in.Name), layout.DiskFile(d))
}

// rootIndex is the index of the instance's root disk (the first disk when
// none is made from an image), -1 when it has no disk.
func rootIndex(in *model.Instance) int {
	root := layout.RootDisk(in)
	if root < 0 && len(in.Disks) > 0 {
		root = 0
	}
	return root
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

// statesOf is the registered part that keeps the instances' states
// (noStates when none does: shelve and rescue are refused).
func statesOf(parts []part.Part) States {
	for _, p := range parts {
		if s, ok := p.(States); ok {
			return s
		}
	}
	return noStates{}
}

// noStates keeps no state.
type noStates struct{}

var errNoStates = errors.New("no part keeps instance states (hostctl/parts/vmstate is not registered)")

func (noStates) Require(context.Context, string, string, string) (vmstate.Record, int64, error) {
	return vmstate.Record{}, 0, errNoStates
}

func (noStates) Put(context.Context, *revert.Reverter, string, vmstate.Record) error {
	return errNoStates
}

func (noStates) Drop(context.Context, *revert.Reverter, string, vmstate.Record, int64) error {
	return errNoStates
}

// blockDevices is the block-device records of instance uuid's disks, by
// disk (none when the store keeps no records).
func blockDevices(ctx context.Context, d Disks, uuid string) (map[string]encryption.BlockDevice, error) {
	rec, err := d.BlockDevices(ctx, uuid)
	return rec.Disks, err
}
